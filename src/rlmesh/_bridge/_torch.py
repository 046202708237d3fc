"""The torch bridge (experimental, BKD-10..13): leaves become ``torch.Tensor``; torch loads on first use.

``torch_as_tensor`` / ``torch_from_tensor`` are the conversions ``rlmesh.torch``
re-exports; ``_is_torch`` recognizes a tensor without importing torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from ._base import Bridge, _require, _same_shapes, from_array

__all__ = ["_TorchBridge", "_is_torch", "torch_as_tensor", "torch_from_tensor"]


def _is_torch(x: Any) -> bool:
    """A ``torch.Tensor`` (or subclass such as ``Parameter``), without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _torch() -> Any:
    return _require("torch", "torch", "rlmesh.torch")


class _TorchBridge(Bridge):
    """Torch values (experimental, BKD-10..13): leaves become ``torch.Tensor``.

    Decoded leaves share memory with the array they come from when it is writable
    (a client's receive buffer is fresh for every reply, so in-place ops are safe
    and no copy is made); a read-only source is copied (BKD-11).
    """

    name = "torch"

    def ensure_available(self) -> None:
        if not self._checked:
            _torch()
            self._checked = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return torch_as_tensor(arr, copy=not arr.flags.writeable)

    def _leaf_in(self, x: Any) -> Any:
        if _is_torch(x):
            return _torch_to_numpy(x)
        return x

    def encode(self, tree: Any) -> Any:
        if _is_torch(tree):  # the common action: one tensor
            if tree.dim() == 0 and tree.dtype is not _torch().bfloat16:
                return tree.item()  # a Discrete (or rank-0 Box) action: exact as a Python scalar
            return _torch_to_numpy(tree)
        if isinstance(tree, (np.ndarray, int, float, str)):
            return tree
        return super().encode(tree)

    def _stack(self, leaves: list[Any], path: str) -> Any:
        torch = _torch()
        tensors = [x if _is_torch(x) else torch.as_tensor(np.asarray(x)) for x in leaves]
        _same_shapes([tuple(t.shape) for t in tensors], path)
        return torch.stack(tensors)

    def supports_device(self) -> bool:
        return True

    def resolve_device(self, device: Any) -> Any:
        """``device`` as a ``torch.device`` (``None`` stays ``None``).

        Raises:
            ValueError: an unknown device string, or a device this machine lacks
                (``"cuda:0"`` without CUDA, an index past ``device_count()``).
        """
        if device is None:
            return None
        torch = _torch()
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"unknown torch device {device!r}: {exc}") from None
        if dev.type == "cpu":
            return dev
        if dev.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if (dev.index or 0) >= count:
                raise ValueError(
                    f"device={device!r} is not available: this machine has {count} CUDA "
                    "device(s); use device='cpu' (or None) or a present device"
                )
            return dev
        try:
            torch.empty(0, device=dev)
        except Exception as exc:
            raise ValueError(f"device={device!r} is not available on this machine: {exc}") from None
        return dev

    def to_device(self, tree: Any, device: Any) -> Any:
        dev = self.resolve_device(device)
        if dev is None:
            return tree
        return _torch_move(tree, dev)

    def to_host(self, value: Any) -> Any:
        if _is_torch(value):
            host = value.detach().cpu()
            return host.item() if host.dim() == 0 else host.tolist()
        return super().to_host(value)


def _torch_move(tree: Any, dev: Any) -> Any:
    if _is_torch(tree):
        return tree.to(dev, non_blocking=True)
    if isinstance(tree, dict):
        return {k: _torch_move(v, dev) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_torch_move(v, dev) for v in tree)
    if isinstance(tree, list):
        return [_torch_move(v, dev) for v in tree]
    return tree


def _torch_to_numpy(x: Any) -> np.ndarray[Any, Any]:
    """A torch tensor as a host ndarray: the tensor's own memory when it is a contiguous CPU tensor.

    Gradients are dropped (``detach``): an action is data, not part of a graph.
    """
    if x.dtype is _torch().bfloat16:
        raise ValueError("bfloat16 is not representable in rlmesh; cast to float32 first")
    if x.requires_grad:
        x = x.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    if not x.is_contiguous():
        x = x.contiguous()
    out: np.ndarray[Any, Any] = x.numpy()
    return out


def torch_as_tensor(t: Any, *, copy: bool = False) -> Any:
    """A ``torch.Tensor`` for an ``rlmesh.Tensor`` or ndarray (BKD-10).

    Zero-copy by default: the result shares memory with ``t`` (torch ignores the
    read-only flag of an ``rlmesh.Tensor``, so writing to it writes to every view);
    ``copy=True`` gives an owned, writable copy.

    Raises:
        ValueError: a dtype this torch build cannot hold (uint16/32/64 need torch >= 2.3).
    """
    torch = _torch()
    arr = t._a if isinstance(t, Tensor) else np.asarray(t)
    if copy:
        arr = np.array(arr, copy=True)
    try:
        if arr.flags.writeable:
            return torch.from_numpy(arr)
        import warnings

        with warnings.catch_warnings():  # "non-writable array": sharing is what was asked for
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(arr)
    except TypeError:
        raise ValueError(
            f"dtype {arr.dtype.name} needs torch >= 2.3 (found {getattr(torch, '__version__', '?')})"
        ) from None


def torch_from_tensor(x: Any) -> Any:
    """A ``torch.Tensor`` as an ``rlmesh.Tensor`` (a copy), a 0-d one as a Python scalar (BKD-12).

    Raises:
        TypeError: ``x`` is not a torch tensor.
        ValueError: bfloat16.
    """
    if not _is_torch(x):
        raise TypeError(f"from_tensor expects a torch.Tensor, got {type(x).__name__}")
    arr = _torch_to_numpy(x)
    if arr.ndim == 0:
        return arr.item()
    return from_array(arr)
