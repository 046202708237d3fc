"""``resolve()``: env tags + spaces + model spec -> :class:`Adapter` (ADP-67/68).

Order of operations (first failure wins; every failure is a resolve-time
:class:`AdapterResolutionError`, never deferred to apply):

1. env tags through the strict door (or the tolerant one for raw peer dicts);
2. custom-encoding inverse self-check, ``Custom`` trust gate and import;
3. bare-unknown-field taint (tolerant door);
4. join (observation tree, then action);
5. per-kind role indexes (duplicates);
6. observation plans, depth-first, dict keys sorted;
7. action plan.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from ..errors import AdapterResolutionError
from ._action import Action, CustomEncoding
from ._adapter import Adapter
from ._check import fail
from ._codec_parse import unknown_field_message, unknown_fields
from ._env_tags import EnvTags, env_tags_from_dict
from ._join import Advisory, Joined, Path, join, render_path
from ._model import Concat, Custom, Image, State, Text
from ._model_spec import ModelSpec, model_spec_from_dict
from ._plans import ImagePlan, Plan, Resolved, StatePlan, TextPlan
from ._resolve_action import model_layout, plan_action
from ._resolve_obs import ObsPlanner
from ._space_outline import outline_of
from ._tags import Split, UnknownLeaf, iter_leaves

__all__ = ["resolve", "resolve_internal"]

_D = TypeVar("_D", EnvTags, ModelSpec)

#: Probe vectors for the custom-encoding inverse self-check (ADP-41).
_PROBES: dict[str, list[float]] = {
    "quat_xyzw": [0.0, 0.0, 0.0, 1.0],
    "quat_wxyz": [1.0, 0.0, 0.0, 0.0],
    "axis_angle": [0.1, -0.2, 0.3],
    "euler_xyz": [0.1, -0.2, 0.3],
    "rot6d": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    "rot6d_rowmajor": [1.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    "gravity_xyz": [0.0, 0.0, -1.0],
}


def _as_env_tags(env_tags: Any) -> EnvTags:
    if isinstance(env_tags, EnvTags):
        try:  # step 1: the strict door also validates Python-built tags (ADP-67)
            EnvTags.from_dict(env_tags.to_dict())
        except AdapterResolutionError:
            raise
        except (ValueError, TypeError) as exc:
            raise fail("invalid_tag", f"env tags are not publishable: {exc}") from None
    return _declaration(env_tags, EnvTags, env_tags_from_dict, "env_tags must be an EnvTags")


def _as_model_spec(spec: Any) -> ModelSpec:
    return _declaration(spec, ModelSpec, model_spec_from_dict, "model_spec must be a ModelSpec")


def _declaration(value: Any, cls: type[_D], from_dict: Callable[..., _D], rule: str) -> _D:
    """``value`` itself if it is a ``cls``, else parsed from its wire dict (tolerant door)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return from_dict(value, strict=False)
    raise fail("invalid_tag", f"{rule} (or its wire dict), got {type(value).__name__}")


def _model_leaves(node: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Depth-first, dict keys sorted by code point, tuple items in order (ADP-67 step 6)."""
    if isinstance(node, Mapping):
        out: list[tuple[Path, Any]] = []
        for k in sorted(node):
            out.extend(_model_leaves(node[k], (*path, k)))
        return out
    if isinstance(node, tuple):
        out = []
        for i, v in enumerate(node):
            out.extend(_model_leaves(v, (*path, i)))
        return out
    return [(path, node)]


def _custom_encodings(spec: ModelSpec) -> list[CustomEncoding]:
    found: list[CustomEncoding] = []
    for _p, leaf in _model_leaves(spec.input):
        parts = (
            (leaf,) if isinstance(leaf, State) else (leaf.parts if isinstance(leaf, Concat) else ())
        )
        found.extend(
            p.encoding
            for p in parts
            if isinstance(p, State) and isinstance(p.encoding, CustomEncoding)
        )
    found.extend(
        a.encoding for a in spec.output.components if isinstance(a.encoding, CustomEncoding)
    )
    return found


def _check_inverse(enc: CustomEncoding) -> None:
    if not (callable(enc.from_base) and callable(enc.to_base)):
        return
    probe = np.asarray(_PROBES[enc.base], dtype=np.float64)
    try:
        back = np.asarray(
            enc.to_base(np.asarray(enc.from_base(probe.copy()), dtype=np.float64)), dtype=np.float64
        )
        ok = back.shape == probe.shape and bool(np.allclose(back, probe, atol=1e-5, rtol=0))
    except Exception as exc:
        raise fail(
            "unsupported",
            f'custom encoding "{enc.name}" failed its inverse self-check on {probe.tolist()} ({exc}), so the arms are not '
            "inverses; fix the arms or "
            "resolve with check_inverse=False",
        ) from None
    if not ok:
        raise fail(
            "unsupported",
            f'custom encoding "{enc.name}": the arms are not inverses: to_base(from_base(p)) != p for the {enc.base} '
            f"probe {probe.tolist()}; "
            "fix the arms or resolve with check_inverse=False",
        )


def _import_entrypoint(ep: str, p: str) -> Any:
    module, _, attr = ep.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for name in attr.split("."):
            obj = getattr(obj, name)
    except Exception as exc:
        raise fail(
            "unsupported", f'model input "{p}": cannot import entrypoint "{ep}": {exc}'
        ) from None
    if not callable(obj):
        raise fail("unsupported", f'model input "{p}": entrypoint "{ep}" is not callable')
    return obj


def _customs(spec: ModelSpec, trust: bool) -> dict[Path, Any]:
    fns: dict[Path, Any] = {}
    for path, leaf in _model_leaves(spec.input):
        if not isinstance(leaf, Custom):
            continue
        p = render_path(path)
        if leaf.transform is not None:
            fns[path] = leaf.transform
        elif not trust:
            raise fail(
                "untrusted_entrypoint",
                f'model input "{p}": Custom(entrypoint="{leaf.entrypoint}") is imported only when you trust it; '
                "pass trust_entrypoints=True",
            )
        else:
            fns[path] = _import_entrypoint(str(leaf.entrypoint), p)
    return fns


def _taint(tags: EnvTags, spec: ModelSpec) -> None:
    """Refuse a bare unknown field on any env or model leaf or action component (tolerant door)."""
    for leaves, action in (
        (iter_leaves(tags.observation), tags.action),
        (_model_leaves(spec.input), spec.output),
    ):
        for path, leaf in leaves:
            _refuse_unknown(leaf, f'feature "{render_path(path)}"')
        for i, a in enumerate(action.components):
            _refuse_unknown(a, f'action component[{i}] (role "{a.role}")')


def _refuse_unknown(obj: Any, subject: str) -> None:
    bad = unknown_fields(obj)
    if bad:
        raise fail("unsupported_kind", unknown_field_message(subject, bad[0]))


def resolve_internal(
    tags: EnvTags,
    observation_space: Any,
    action_space: Any,
    spec: ModelSpec,
    *,
    trust_entrypoints: bool = False,
    check_inverse: bool = True,
) -> Resolved:
    """Steps 2..7 on already-parsed tags/spec; returns the plan data."""
    if check_inverse:
        for enc in _custom_encodings(spec):
            _check_inverse(enc)
    custom_fns = _customs(spec, trust_entrypoints)
    _taint(tags, spec)
    obs_outline = outline_of(observation_space, "observation_space")
    act_outline = outline_of(action_space, "action_space")
    joined: Joined = join(tags.observation, tags.action, obs_outline, act_outline)
    slices, labels, _ = model_layout(spec.output)
    planner = ObsPlanner(joined, slices, labels)
    plans: list[Plan] = []
    roots = 0
    for path, leaf in _model_leaves(spec.input):
        if path == ():
            roots += 1
        if isinstance(leaf, Image):
            plans.append(planner.image(leaf, path))
        elif isinstance(leaf, (State, Concat)):
            plans.append(planner.state(leaf, path))
        elif isinstance(leaf, Text):
            plans.append(planner.text(leaf, path))
        elif isinstance(leaf, Custom):
            plans.append(planner.custom(leaf, path, custom_fns[path]))
        else:
            assert isinstance(leaf, UnknownLeaf)
            raise fail(
                "unsupported_kind",
                f'model input "{render_path(path)}" is of unrecognized kind "{leaf.kind}"; upgrade the runtime',
            )
    silent = list(planner.silent_adv)
    resolve_adv = list(planner.resolve_adv)
    action = plan_action(joined, spec.output, resolve_adv, silent)
    for i, u in enumerate(joined.unknowns):
        if i not in planner.used_unknown:
            resolve_adv.append(Advisory(
                "info",
                f'env feature "{render_path(u.path)}" (role "{u.role or "<none>"}"): unrecognized kind "{u.kind}"; '
                "ignored (no model input requires it)",
            ))  # fmt: skip
    root_dict = obs_outline.kind == "dict"
    return Resolved(
        plans=plans,
        action=action,
        root_dict=root_dict,
        resolve_advisories=resolve_adv,
        join_advisories=list(joined.advisories),
        loss_advisories=list(planner.loss_adv),
        silent_advisories=silent,
        referenced_keys=_referenced(plans, root_dict),
    )


def _referenced(plans: list[Plan], root_dict: bool) -> tuple[str, ...]:
    paths: list[Path] = []
    for plan in plans:
        if isinstance(plan, ImagePlan) and plan.feature is not None:
            paths.append(plan.feature.path)
        elif isinstance(plan, StatePlan):
            paths.extend(
                x.feature.path for x in plan.pieces if x.kind == "source" and x.feature is not None
            )
        elif isinstance(plan, TextPlan) and plan.source is not None:
            paths.append(plan.source)
    keys: list[str] = []
    for path in paths:
        key = str(path[0]) if root_dict and path else "<obs>"
        if root_dict and key == "<obs>":
            raise fail(
                "invalid_tag",
                'the observation key "<obs>" is reserved for non-Dict observations; rename it',
            )
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def resolve(
    env_tags: EnvTags | Mapping[str, Any],
    observation_space: Any,
    action_space: Any,
    model_spec: ModelSpec | Mapping[str, Any],
    *,
    trust_entrypoints: bool = False,
    check_inverse: bool = True,
) -> Any:
    """Match a model spec against env tags and spaces; return an :class:`Adapter` (ADP-67).

    Args:
        env_tags: The env's :class:`EnvTags` (a raw wire dict goes through the tolerant door).
        observation_space: Gymnasium space, rlmesh ``SpaceSpec``/space, or a space view dict.
        action_space: Same forms; must describe a Box.
        model_spec: The model's :class:`ModelSpec` (or its wire dict).
        trust_entrypoints: Import ``Custom(entrypoint=...)`` inputs.
        check_inverse: Round-trip two-armed custom encodings on a probe first.

    Raises:
        AdapterResolutionError: a model input or env actuator has no usable
            counterpart, or a declared conversion is impossible.

    >>> from rlmesh.adapters import *
    >>> tags = EnvTags({"pos": StateTag(EEF_POS)}, Action(Actuator(ACTION_GRIPPER, dim=1)))
    >>> spec = ModelSpec({"state": Concat(EEF_POS)}, Action(Actuator(ACTION_GRIPPER, dim=1)))
    >>> obs_space = {"kind": "dict", "keys": ["pos"], "children": [{"kind": "box", "dtype": "float32", "shape": [3]}]}
    >>> adapter = resolve(tags, obs_space, {"kind": "box", "dtype": "float32", "shape": [1]}, spec)
    >>> print(adapter.describe())
    observation:
      "state" <- concat(pos)
    action:
      "action/gripper" <- model[0:1]
    >>> adapter.transform_obs({"pos": [1.0, 2.0, 3.0]})["state"].tolist()
    [1.0, 2.0, 3.0]
    """
    tags = _as_env_tags(env_tags)
    spec = _as_model_spec(model_spec)
    r = resolve_internal(
        tags,
        observation_space,
        action_space,
        spec,
        trust_entrypoints=trust_entrypoints,
        check_inverse=check_inverse,
    )
    return Adapter(r)


_ = (Action, Split)
