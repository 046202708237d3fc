"""Env gathering for describe: one representative env, its spaces, tags and contract branches (AUTH-13/14)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..spaces import SpaceSpec, from_gymnasium_space
from ._canonical import json_value
from ._factory import ENV_METADATA_KEY, contract_branches
from ._gather import badge, method_target, params_section, variants_section
from ._params import ParamError, ParamSpec
from ._resolve import resolve_params
from ._variants import Variant

__all__ = ["env_pieces", "space_dict"]


def space_dict(space: Any) -> dict[str, Any]:
    """The canonical SpaceSpec dict of an rlmesh spec/space or a Gymnasium space."""
    if isinstance(space, SpaceSpec):
        return space._to_dict()
    spec = getattr(space, "spec", None)
    if isinstance(spec, SpaceSpec):
        return spec._to_dict()
    converted = from_gymnasium_space(space)
    spec = converted if isinstance(converted, SpaceSpec) else converted.spec
    return spec._to_dict()


def _env_spec(env: Any) -> dict[str, Any]:
    if isinstance(env, (list, tuple)):
        if not env:
            raise ValueError("make() returned an empty list of envs")
        env = env[0]
    vector = any(
        hasattr(env, a) for a in ("num_envs", "single_observation_space", "single_action_space")
    )
    if vector:  # SRV-3: vector envs publish their per-lane spaces
        obs = getattr(env, "single_observation_space", None)
        act = getattr(env, "single_action_space", None)
        obs = env.observation_space if obs is None else obs
        act = env.action_space if act is None else act
        return {
            "observation_space": space_dict(obs),
            "action_space": space_dict(act),
            "num_envs": int(env.num_envs),
        }
    return {
        "observation_space": space_dict(env.observation_space),
        "action_space": space_dict(env.action_space),
    }


def _missing_required(target: Callable[..., Any] | None, kwargs: Mapping[str, Any]) -> bool:
    try:
        sig = inspect.signature(target) if target is not None else None
    except (TypeError, ValueError):
        return False
    if sig is None:
        return False
    return any(
        p.default is p.empty and p.name not in kwargs
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def _close_quietly(env: Any) -> None:
    for e in env if isinstance(env, (list, tuple)) else [env]:
        try:
            e.close()
        except Exception:
            pass


class _Gatherer:
    """Collects the env pieces for one describe call."""

    def __init__(self, obj: Any, *, served_env: Any, build_env: bool) -> None:
        self.obj = obj
        self.served_env = served_env
        self.build_env = build_env
        self.is_factory = hasattr(obj if isinstance(obj, type) else type(obj), "make")
        self.cls: type | None = (
            (obj if isinstance(obj, type) else type(obj)) if self.is_factory else None
        )
        self.instance: Any = None

    def _instance(self) -> Any:
        if self.instance is None:
            assert self.cls is not None
            instance = self.obj if not isinstance(self.obj, type) else self.cls()
            if hasattr(instance, "prepare"):
                instance.prepare()
            self.instance = instance
        return self.instance

    def make(self, kwargs: Mapping[str, Any]) -> Any:
        if self.is_factory:
            return self._instance().make(**kwargs)
        return self.obj(**kwargs)  # a bare make callable or an env class

    def env_pieces(
        self, spec: ParamSpec | None, target: Callable[..., Any] | None, catalog: list[Variant]
    ) -> tuple[Any, Any, Any]:
        """``(env_spec, env_tags, built_env_metadata)``; the representative env is closed."""
        env: Any = None
        built = False
        if self.served_env is not None:
            env = (
                self.served_env[0]
                if isinstance(self.served_env, (list, tuple))
                else self.served_env
            )
        elif not self.build_env:
            env_spec: Any = {"error": "not built (build_env=False)", "error_type": "NotBuilt"}
            return env_spec, self._class_tags(None), None
        else:
            try:
                env = self.make(self.default_kwargs(spec, target, catalog))
                built = True
            except Exception as exc:
                return badge(exc, with_type=True), self._class_tags(None), None
        try:
            env_spec = _env_spec(env)
        except Exception as exc:
            env_spec = badge(exc, with_type=True)
        first = env[0] if isinstance(env, (list, tuple)) and env else env
        md = getattr(first, "metadata", None)
        tags = self._class_tags(md if isinstance(md, Mapping) else None)
        if built:
            _close_quietly(env)
        return env_spec, tags, md

    def default_kwargs(
        self, spec: ParamSpec | None, target: Callable[..., Any] | None, catalog: list[Variant]
    ) -> dict[str, Any]:
        """Declared defaults, else the first catalog variant's binding, else ``{}`` (AUTH-13)."""
        try:
            kwargs = resolve_params(spec, target, {})
            if not _missing_required(target, kwargs):
                return kwargs
        except ParamError:
            pass
        if catalog:
            try:
                return resolve_params(spec, target, catalog[0].params)
            except ParamError:
                pass
        return {}

    def _class_tags(self, metadata: Mapping[str, Any] | None) -> Any:
        tags = getattr(self.cls, "tags", None) if self.cls is not None else None
        if tags is not None:
            try:
                return tags.to_dict()
            except Exception as exc:
                return badge(exc)
        if metadata is not None and ENV_METADATA_KEY in metadata:
            return json_value(metadata[ENV_METADATA_KEY])
        return None

    def env_contracts(
        self, top_spec: Any, top_tags: Any, base_kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Every contract branch of a ``tag_params`` factory, default first (DELTA-53)."""
        cls = self.cls
        assert cls is not None
        try:
            branches = contract_branches(cls)
            out = []
            for i, branch in enumerate(branches):
                if i == 0:
                    tags_d, spec_d = top_tags, top_spec
                else:
                    try:
                        t = cls.tags_for(**branch)  # type: ignore[attr-defined]
                        tags_d = None if t is None else t.to_dict()
                    except Exception as exc:
                        tags_d = badge(exc)
                    spec_d = self._branch_spec({**base_kwargs, **branch})
                out.append(
                    {
                        "params": json_value(branch),
                        "default": i == 0,
                        "env_tags": tags_d,
                        "env_spec": spec_d,
                    }
                )
            return {"discriminants": list(cls.tag_params), "branches": out}  # type: ignore[attr-defined]
        except Exception as exc:
            return badge(exc)

    def _branch_spec(self, kwargs: Mapping[str, Any]) -> Any:
        if not self.build_env or self.served_env is not None:
            return {"error": "not built", "error_type": "NotBuilt"}
        try:
            env = self.make(kwargs)
        except Exception as exc:
            return badge(exc, with_type=True)
        try:
            return _env_spec(env)
        except Exception as exc:
            return badge(exc, with_type=True)
        finally:
            _close_quietly(env)


def env_pieces(obj: Any, *, served_env: Any, build_env: bool) -> tuple[dict[str, Any], type | None]:
    g = _Gatherer(obj, served_env=served_env, build_env=build_env)
    cls = g.cls
    if cls is not None:
        spec = getattr(cls, "params", None)
        target = method_target(cls, "make")
    else:
        spec, target = None, obj
    typed_spec = spec if isinstance(spec, ParamSpec) else None
    pieces: dict[str, Any] = {"target": None}
    variants, catalog = variants_section(cls, typed_spec, target) if cls is not None else (None, [])
    env_spec, env_tags, _ = g.env_pieces(typed_spec, target, catalog)
    pieces["env_spec"] = env_spec
    pieces["env_tags"] = env_tags
    if cls is not None and getattr(cls, "tag_params", None):
        pieces["env_contracts"] = g.env_contracts(
            env_spec, env_tags, g.default_kwargs(typed_spec, target, catalog)
        )
    pieces["params"] = params_section(spec, target)
    if variants is not None:
        pieces["variants"] = variants
    return pieces, cls
