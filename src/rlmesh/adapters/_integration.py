"""Integration verbs: ``tag``, ``validate_env_tags``, ``resolve_from_contract``, ``Reader`` (ADP-134..137).

These are the entry points servers, factories and sessions call; nothing here
knows about transports.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import AdapterResolutionError
from ._action import Action, Actuator
from ._adapter import Adapter
from ._check import fail
from ._env_tags import EnvTags, env_tags_from_dict
from ._join import Advisory, join
from ._model import Concat, Image, State, Text
from ._model_spec import ModelSpec
from ._resolve import _as_model_spec, resolve_internal
from ._roles import ENV_METADATA_KEY, identity
from ._space_outline import outline_of
from ._tags import ImageTag, ObservationRoles, Split, StateTag, TextTag, iter_leaves

__all__ = [
    "Reader",
    "build_reader",
    "observation_roles",
    "resolve_from_contract",
    "tag",
    "validate_env_tags",
]

_NO_TAGS = f"env contract carries no adapter tags under '{ENV_METADATA_KEY}'; serve the env with rlmesh.adapters.tag(...)"


def validate_env_tags(
    tags: EnvTags | Mapping[str, Any], observation_space: Any, action_space: Any
) -> list[Advisory]:
    """Validate tags against spaces: strict door + join (ADP-134, SRV-20/21).

    Returns:
        The join advisories (layout hints, unregistered roles); the caller
        decides how to surface them (``tag()`` emits ``UserWarning``s).

    Raises:
        AdapterResolutionError: the tags do not fit the spaces.
    """
    doc = tags.to_dict() if isinstance(tags, EnvTags) else tags
    parsed = env_tags_from_dict(doc, strict=True)
    joined = join(parsed.observation, parsed.action, outline_of(observation_space, "observation_space"),
                  outline_of(action_space, "action_space"))  # fmt: skip
    return list(joined.advisories)


def tag(env: Any, tags: EnvTags, *, validate: bool = True) -> Any:
    """Stamp ``tags`` into ``env.metadata`` under ``ENV_METADATA_KEY``; returns ``env`` (ADP-134).

    With ``validate`` the env must expose ``observation_space`` and
    ``action_space``; tags that do not fit raise and publish nothing, and join
    advisories are emitted as ``UserWarning``s. ``env.metadata`` is replaced by
    a merged copy (the original mapping is never mutated).
    """
    if not isinstance(tags, EnvTags):
        raise TypeError(f"tag() needs an EnvTags, got {type(tags).__name__}")
    if validate:
        obs_space = getattr(env, "observation_space", None)
        act_space = getattr(env, "action_space", None)
        if obs_space is None or act_space is None:
            raise fail(
                "invalid_tag",
                f"tag(): {type(env).__name__} exposes no observation_space/action_space to validate the tags "
                "against; pass validate=False to stamp them unchecked",
            )
        for adv in validate_env_tags(tags, obs_space, act_space):
            warnings.warn(adv.message, UserWarning, stacklevel=2)
    existing = getattr(env, "metadata", None)
    merged = dict(existing) if isinstance(existing, Mapping) else {}
    merged.update(tags.to_metadata())
    env.metadata = merged
    return env


def _raw_tags(metadata: Any) -> Mapping[str, Any]:
    if metadata is None or not isinstance(metadata, Mapping) or ENV_METADATA_KEY not in metadata:
        raise fail("missing_role", _NO_TAGS)
    raw = metadata[ENV_METADATA_KEY]
    if not isinstance(raw, Mapping):
        raise fail(
            "invalid_tag",
            f"env metadata '{ENV_METADATA_KEY}' must hold a mapping, got {type(raw).__name__}",
        )
    try:
        json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise fail(
            "invalid_tag",
            f"env tags under '{ENV_METADATA_KEY}' are not serializable JSON data: {exc}",
        ) from None
    return raw


def _tags_of(source: Any) -> tuple[EnvTags, Any, Any]:
    """``(tags, obs_space, act_space)`` from a contract-like object or a triple."""
    if isinstance(source, tuple) and len(source) == 3:
        tags, obs, act = source
        if isinstance(tags, EnvTags):
            return tags, obs, act
        if isinstance(tags, Mapping) and ENV_METADATA_KEY in tags:
            tags = _raw_tags(tags)
        if isinstance(tags, Mapping):
            return env_tags_from_dict(tags, strict=False), obs, act
        raise fail("missing_role", _NO_TAGS)
    metadata = getattr(source, "metadata", None)
    return (
        env_tags_from_dict(_raw_tags(metadata), strict=False),
        source.observation_space,
        source.action_space,
    )


def resolve_from_contract(
    contract: Any,
    model_spec: ModelSpec,
    *,
    trust_entrypoints: bool = False,
    check_inverse: bool = True,
) -> Any:
    """Resolve from an env contract: raw tags from ``contract.metadata`` plus its spaces (ADP-136).

    ``contract`` is anything with ``.metadata`` (mapping or ``None``),
    ``.observation_space`` and ``.action_space``. The tags are read through
    the tolerant door (a newer peer's unknown kinds/fields are judged at
    resolve).
    """
    tags, obs, act = _tags_of(contract)
    spec = _as_model_spec(model_spec)
    return Adapter(
        resolve_internal(
            tags, obs, act, spec, trust_entrypoints=trust_entrypoints, check_inverse=check_inverse
        )
    )


def observation_roles(tags: Any) -> ObservationRoles:
    """Declared observation roles by kind (ADP-26, EVAL-17); no tags -> empty groups.

    ``tags`` may be an :class:`EnvTags`, its wire dict, env metadata holding
    ``ENV_METADATA_KEY``, a contract-like object, or ``None``.
    """
    if tags is None:
        return ObservationRoles()
    if isinstance(tags, EnvTags):
        return tags.observation_roles
    if not isinstance(tags, Mapping):
        tags = getattr(tags, "metadata", None)
        if tags is None:
            return ObservationRoles()
    if ENV_METADATA_KEY in tags:
        tags = tags[ENV_METADATA_KEY]
    elif "observation" not in tags:
        return ObservationRoles()
    return env_tags_from_dict(tags, strict=False).observation_roles


# -- Reader (EVAL-15/16, ADP-137) ----------------------------------------------------------------
def _env_leaf_for(tags: EnvTags, role: str) -> Any:
    for _path, leaf in iter_leaves(tags.observation):
        if isinstance(leaf, (ImageTag, StateTag, TextTag)) and leaf.role == role:
            return leaf
        if isinstance(leaf, Split):
            for f in leaf.fields:
                if f.role == role:
                    return f
    return None


def _desugar(tags: EnvTags, item: Any) -> tuple[str, Any]:
    if isinstance(item, str):
        leaf = _env_leaf_for(tags, item)
        if leaf is None:
            roles = tags.observation_roles
            declared = sorted({*roles.images, *roles.states, *roles.texts})
            raise fail(
                "missing_role",
                f'reader: the env declares no observation role "{item}" (it declares {declared})',
            )
        if isinstance(leaf, ImageTag):
            return item, Image(
                item, layout=leaf.layout, upside_down=leaf.upside_down, part=leaf.part
            )
        if isinstance(leaf, TextTag):
            return item, Text(item)
        enc = leaf.encoding
        native = enc if isinstance(enc, str) or enc is None else enc[0]
        return item, State(item, encoding=native, part=leaf.part)
    if isinstance(item, (Image, Text)):
        return item.role, item
    if isinstance(item, State):
        return item.role, item
    if (
        isinstance(item, Concat)
        and len(item.parts) == 1
        and isinstance(item.parts[0], (str, State))
    ):
        p = item.parts[0]
        return (p if isinstance(p, str) else p.role), item
    raise TypeError(
        f"reader items must be role strings or single-role leaves (Image, State, Text), got {type(item).__name__}"
    )


class Reader:
    """A role-addressed, read-only view over observations (EVAL-15, ADP-137).

    ``reader(obs)`` returns ``{role: value}`` through the same pipeline a model
    adapter uses; a bare role reads the env-native encoding. Never mutates obs.
    """

    def __init__(self, adapter: Any, roles: tuple[str, ...]) -> None:
        self._adapter = adapter
        self.roles = roles

    def __call__(self, observation: Any) -> dict[str, Any]:
        payload = self._adapter.transform_obs(observation)
        return {r: payload[r] for r in self.roles if r in payload}

    def read(self, observation: Any, role: str | None = None) -> Any:
        """One value: the only role, or ``role``."""
        out = self(observation)
        key = role if role is not None else self.roles[0]
        if key not in out:
            raise KeyError(f"reader has no value for role {key!r} in this observation")
        return out[key]

    def reset(self) -> None:
        """Clear frame windows (stacked image reads)."""
        self._adapter.reset()

    def __repr__(self) -> str:
        return f"Reader(roles={list(self.roles)})"


def build_reader(source: Any, *items: Any) -> Reader:
    """Resolve a :class:`Reader` for ``items`` against an env (EVAL-15).

    Args:
        source: A contract-like object (``.metadata``, ``.observation_space``,
            ``.action_space``) or a ``(tags, observation_space, action_space)``
            triple (tags: ``EnvTags``, wire dict, or metadata).
        items: Role strings (env-native encoding) or single-role leaves.

    Raises:
        TypeError: no items, or an item of the wrong type.
        AdapterResolutionError: untagged env, an undeclared role, a role read twice.
    """
    if not items:
        raise TypeError("reader() needs at least one role or leaf")
    try:
        tags, obs, act = _tags_of(source)
    except AdapterResolutionError as exc:
        if ENV_METADATA_KEY in str(exc):
            raise fail(
                "missing_role",
                "the env publishes no adapter tags; tag it to read observations by role",
            ) from None
        raise
    pairs = [_desugar(tags, it) for it in items]
    roles = tuple(r for r, _ in pairs)
    dupes = sorted({r for r in roles if roles.count(r) > 1})
    if dupes:
        raise fail("duplicate", f"reader reads role(s) {dupes} more than once")
    out = Action._unchecked(
        [
            Actuator(a.role, a.dim, a.encoding, a.range, part=a.part, labels=a.labels)
            if a.role is not None
            else Actuator(dim=a.dim)
            for a in tags.action.components
        ],
        None,
    )
    spec = ModelSpec._unchecked(dict(pairs), out)
    return Reader(Adapter(resolve_internal(tags, obs, act, spec)), roles)


_ = identity
