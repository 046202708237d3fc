"""``rlmesh.torch.Model``: the model flavour whose corners see ``torch.Tensor`` values (MOD-1, MOD-25)."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from ._framework import FrameworkModel

__all__ = ["TorchModel"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class TorchModel(FrameworkModel[ObsT, ActT]):
    """A model whose corners see ``torch.Tensor`` leaves (re-exported as ``rlmesh.torch.Model``).

    Observation leaves arrive as CPU tensors that share memory with the env's
    arrays when those are writable (a copy otherwise), moved to :attr:`device`
    when it is set (read at every predict, so ``load()`` may set it); Discrete
    values arrive as Python ints and Text as ``str``. Return tensors (on any
    device, with or without gradients), numpy arrays or Python values. Batched
    corners receive fused ``[N, ...]`` tensors (``torch.stack``) and must return
    a leading lane axis; a chunk-only model derives ``predict`` from frame 0.

    Constructing one without torch installed raises ``ImportError`` (MOD-1).
    """

    _bridge_name: ClassVar[str] = "torch"
