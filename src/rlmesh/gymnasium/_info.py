"""Info in Gymnasium's conventions: the env's own keys, vector arrays with ``_key`` masks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from ._shared import _WARNING_KEY, log


def _filtered(info: dict[str, Any], runtime: dict[str, Any] | None) -> dict[str, Any]:
    """The env's own info; with ``runtime`` (``episode_info=True``) the runtime keys too (the env's win)."""
    if runtime is None:
        warnings = info.pop(_WARNING_KEY, None)
        if warnings:
            log.warning("rlmesh conformance warning from the env: %s", warnings)
        return info
    for key, value in runtime.items():
        info.setdefault(key, value)
    return info


def _as_space_value(space: gymnasium.Space[Any], value: Any) -> Any:
    """A plain value that travelled through the metadata codec, back in ``space``'s types."""
    gs = gymnasium.spaces
    if value is None:
        return None
    if isinstance(space, gs.Dict) and isinstance(value, Mapping):
        return {
            k: _as_space_value(sub, value[k]) if k in value else None
            for k, sub in space.spaces.items()
        }
    if isinstance(space, gs.Tuple) and isinstance(value, (list, tuple)):
        return tuple(_as_space_value(sub, v) for sub, v in zip(space.spaces, value))
    if isinstance(space, gs.Text):
        return value
    if isinstance(space, gs.Discrete):
        return (
            np.asarray(value, dtype=space.dtype).reshape(())[()] if np.ndim(value) == 0 else value
        )
    dtype = getattr(space, "dtype", None)
    return np.asarray(value, dtype=dtype)


def _reset_mask(
    options: dict[str, Any] | None, num_envs: int
) -> tuple[dict[str, Any] | None, list[int] | None]:
    """``options`` without its ``reset_mask``, and the lanes the mask selects (``None``: no mask)."""
    opts = dict(options) if options else None
    if opts is None or "reset_mask" not in opts:
        return opts, None
    mask = np.asarray(opts.pop("reset_mask"), dtype=bool).reshape(-1)
    if mask.shape != (num_envs,):
        raise ValueError(f"reset_mask must be {num_envs} booleans, got shape {mask.shape}")
    indices = mask.nonzero()[0].tolist()
    if not indices:
        raise ValueError("reset_mask selects no lane")
    return opts or None, indices


def _arrayify(info: Mapping[str, Any], n: int, obs_space: gymnasium.Space[Any]) -> dict[str, Any]:
    """A served Gymnasium vector info (whose arrays became lists on the wire) with arrays again."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, Mapping):
            out[key] = _arrayify(value, n, obs_space)
        elif key == "final_obs" and isinstance(value, list) and len(value) == n:
            arr = np.full(n, None, dtype=object)
            for i, v in enumerate(value):
                arr[i] = _as_space_value(obs_space, v)
            out[key] = arr
        elif isinstance(value, list) and len(value) == n:
            if key.startswith("_"):
                out[key] = np.asarray(value, dtype=bool)
                continue
            try:
                arr = np.asarray(value)
            except ValueError:
                arr = np.empty(0)
            if arr.dtype == object or arr.shape[:1] != (n,) or arr.dtype.kind in "US":
                arr = np.full(n, None, dtype=object)
                for i, v in enumerate(value):
                    arr[i] = v
            out[key] = arr
        else:
            out[key] = value
    return out
