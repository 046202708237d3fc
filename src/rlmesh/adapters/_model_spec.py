"""``ModelSpec``: the full payload a model ingests and the action it emits (ADP-31..36, ADP-44..49).

>>> spec = ModelSpec(
...     input={"image": Image(IMAGE_PRIMARY, size=224), "state": Concat(EEF_POS, GRIPPER_POS)},
...     output=Action(Actuator(ACTION_GRIPPER, dim=1)),
... )
>>> spec.input["image"].height, spec.input["image"].width
(224, 224)
>>> ModelSpec.from_json(spec.to_json()) == spec
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._action import Action, Actuator
from ._codec import leaf_key, model_spec_to_dict
from ._codec_parse import model_spec_parts
from ._document import TreeAndAction
from ._model import Concat, Image, check_input_tree
from ._roles import ACTION_GRIPPER, EEF_POS, GRIPPER_POS, IMAGE_PRIMARY, MODEL_METADATA_KEY
from ._tags import node_key

__all__ = ["ModelSpec", "model_spec_from_dict"]


class ModelSpec(TreeAndAction):
    """What a model ingests and emits: ``ModelSpec(input, output)`` (ADP-31)."""

    _METADATA_KEY = MODEL_METADATA_KEY

    __slots__ = ()

    def __init__(self, input: Any, output: Action) -> None:
        inp = check_input_tree(input)
        if not isinstance(output, Action):
            raise TypeError(f"ModelSpec output must be an Action(...), got {type(output).__name__}")
        self._set(inp, output)

    @property
    def input(self) -> Any:
        """The input tree (its container is the payload container)."""
        return self._tree

    @property
    def output(self) -> Action:
        """The action layout the model emits."""
        return self._action

    def to_dict(self) -> dict[str, Any]:
        """The canonical wire form; refused when any ``Custom`` input is present (ADP-48)."""
        return model_spec_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        """Parse the wire form through the strict door (ADP-54)."""
        return model_spec_from_dict(data, strict=True)

    def _key(self) -> Any:
        return (node_key(self._tree, leaf_key), self._action)

    def __repr__(self) -> str:
        return f"ModelSpec(input={self._tree!r}, output={self._action!r})"


def model_spec_from_dict(data: Any, *, strict: bool = True) -> ModelSpec:
    """Parse ``{"input", "output"}`` into :class:`ModelSpec` (ADP-44, ADP-54)."""
    inp, output = model_spec_parts(data, strict=strict)
    return ModelSpec._unchecked(inp, output)


_ = (IMAGE_PRIMARY, EEF_POS, GRIPPER_POS, ACTION_GRIPPER, Actuator, Concat, Image)  # doctest names
