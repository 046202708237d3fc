"""``EnvTags``: an environment's tag document, tree plus action layout (ADP-20..27, ADP-44..49).

>>> tags = EnvTags(
...     observation={"cam": ImageTag(IMAGE_PRIMARY), "pos": StateTag(EEF_POS)},
...     action=Action(Actuator(ACTION_DELTA_POS, dim=3)),
... )
>>> tags.observation_roles
ObservationRoles(images=('image/primary',), states=('proprio/eef_pos',), texts=())
>>> EnvTags.from_json(tags.to_json()) == tags
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._action import Action, Actuator
from ._codec import env_tags_to_dict
from ._codec_parse import build, env_tags_parts
from ._document import TreeAndAction
from ._roles import ACTION_DELTA_POS, EEF_POS, ENV_METADATA_KEY, IMAGE_PRIMARY
from ._tags import (
    ImageTag,
    ObservationRoles,
    Split,
    StateTag,
    TextTag,
    check_duplicates,
    check_obs_tree,
    iter_leaves,
    node_key,
)

__all__ = ["EnvTags", "env_tags_from_dict"]


class EnvTags(TreeAndAction):
    """An environment's tags: ``EnvTags(observation, action)`` (ADP-20).

    ``observation`` is a tree whose container is the runtime container: a dict
    maps a Dict space, a tuple maps a Tuple space, a bare leaf tags one space
    leaf. Keys not mentioned are untagged. ``action`` is an :class:`Action`.
    """

    _METADATA_KEY = ENV_METADATA_KEY
    _METADATA_NOUN = "env metadata"

    __slots__ = ()

    def __init__(self, observation: Any, action: Action) -> None:
        obs = check_obs_tree(observation)
        if not isinstance(action, Action):
            raise TypeError(f"EnvTags action must be an Action(...), got {type(action).__name__}")
        check_duplicates(obs)
        self._set(obs, action)

    @property
    def observation(self) -> Any:
        """The observation tag tree."""
        return self._tree

    @property
    def action(self) -> Action:
        """The env action layout."""
        return self._action

    @property
    def observation_roles(self) -> ObservationRoles:
        """Declared roles by kind, in declaration order (ADP-26)."""
        images: list[str] = []
        states: list[str] = []
        texts: list[str] = []
        for _path, leaf in iter_leaves(self._tree):
            if isinstance(leaf, ImageTag):
                images.append(leaf.role)
            elif isinstance(leaf, StateTag):
                states.append(leaf.role)
            elif isinstance(leaf, TextTag):
                texts.append(leaf.role)
            elif isinstance(leaf, Split):
                states.extend(f.role for f in leaf.fields if f.role is not None)
        return ObservationRoles(tuple(images), tuple(states), tuple(texts))

    # -- wire -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The canonical wire form ``{"observation": ..., "action": ...}`` (ADP-44/46)."""
        return env_tags_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvTags:
        """Parse the wire form through the strict door (ADP-54).

        Raises:
            AdapterResolutionError: malformed or unknown content (a ``ValueError``).
        """
        return env_tags_from_dict(data, strict=True)

    # -- value semantics -------------------------------------------------------------
    def _key(self) -> Any:
        return (node_key(self._tree), self._action)

    def __repr__(self) -> str:
        return f"EnvTags(observation={self._tree!r}, action={self._action!r})"


def env_tags_from_dict(data: Any, *, strict: bool = True) -> EnvTags:
    """Parse ``{"observation", "action"}`` into :class:`EnvTags` (ADP-44, ADP-54)."""
    obs, action = env_tags_parts(data, strict=strict)
    if not strict:
        return EnvTags._unchecked(obs, action)
    if not action.components:
        return build(EnvTags._unchecked, "env tags", _check_dupes(obs), action)
    return build(EnvTags, "env tags", obs, action)


def _check_dupes(obs: Any) -> Any:
    check_duplicates(obs)
    return obs


_ = (IMAGE_PRIMARY, EEF_POS, ACTION_DELTA_POS, Actuator)  # names used by the doctests
