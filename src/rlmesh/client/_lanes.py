"""Lane bookkeeping of a many-endpoint vector env: seeds, action slices, batches, infos (issue 26).

Pure functions over NumPy trees, shared by :mod:`rlmesh.client._fanout` and
:mod:`rlmesh.sb3` (and :func:`step_lanes`, a vector step reply's lane arrays, by every
vector client). Info merging follows ``gymnasium.vector.VectorEnv._add_info``
exactly, so a merged info is what a local ``SyncVectorEnv`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ProtocolException

__all__ = [
    "add_info",
    "batch1",
    "concat",
    "lane_array",
    "lane_infos",
    "lane_of",
    "lane_seeds",
    "merge",
    "replace_rows",
    "step_lanes",
    "take",
]


def lane_seeds(seed: Any, n: int, chosen: list[int]) -> list[int | None] | None:
    """Per global lane: ``seed + i`` for an int (Gymnasium's rule), a list per lane or per chosen lane."""
    if seed is None:
        return None
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(n)]
    if isinstance(seed, (str, bytes)) or not isinstance(seed, Sequence | np.ndarray):
        raise TypeError(f"seed must be an int, a list of ints or None, got {type(seed).__name__}")
    values = [None if s is None else int(s) for s in seed]
    if len(values) == n:
        return values
    if len(values) == len(chosen):
        out: list[int | None] = [None] * n
        for g, s in zip(chosen, values):
            out[g] = s
        return out
    raise ValueError(
        f"expected {n} seeds (one per lane) or {len(chosen)} (one per reset lane), got {len(values)}"
    )


def take(tree: Any, where: slice | int, n: int, path: str) -> Any:
    """A lane slice (or one lane) of a batched action tree."""
    if isinstance(tree, Mapping):
        return {k: take(v, where, n, f"{path}[{k!r}]") for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(take(v, where, n, f"{path}[{i}]") for i, v in enumerate(tree))
    arr = tree if isinstance(tree, np.ndarray) else np.asarray(tree)
    if arr.ndim == 0 or arr.shape[0] != n:
        raise ValueError(
            f"batched action leaf {path} has shape {list(arr.shape)}; expected a leading lane axis of {n} "
            f"(one action per lane)"
        )
    return arr[where]


def batch1(tree: Any) -> Any:
    """A scalar endpoint's value with a lane axis of one."""
    if isinstance(tree, Mapping):
        return {k: batch1(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(batch1(v) for v in tree)
    if isinstance(tree, str):
        return [tree]
    return np.asarray(tree)[None]


def concat(trees: list[Any]) -> Any:
    first = trees[0]
    if len(trees) == 1:
        return first
    if isinstance(first, Mapping):
        return {k: concat([t[k] for t in trees]) for k in first}
    if isinstance(first, tuple):
        return tuple(concat([t[i] for t in trees]) for i in range(len(first)))
    if isinstance(first, list):
        return [x for t in trees for x in t]
    return np.concatenate(trees, axis=0)


def lane_infos(info: Mapping[str, Any], n: int, same_step: bool, done: Any) -> list[dict[str, Any]]:
    """One endpoint's served info as ``n`` per-lane dicts (Gymnasium's per-sub-env infos)."""
    lanes = info.get("final_info")
    if isinstance(lanes, list) and len(lanes) == n and "_final_info" in info:
        # a lane endpoint: one plain info per lane (plus final_obs / reset_info under SAME_STEP)
        final_obs = info.get("final_obs")
        reset_infos = info.get("reset_info")
        out = []
        for i, lane in enumerate(lanes):
            own = dict(lane) if isinstance(lane, Mapping) else {}
            if same_step and done is not None and done[i]:
                ended = final_obs[i] if isinstance(final_obs, list) and i < len(final_obs) else None
                nxt = (
                    reset_infos[i]
                    if isinstance(reset_infos, list) and i < len(reset_infos)
                    else None
                )
                own = {
                    "final_obs": ended,
                    "final_info": own,
                    **(dict(nxt) if isinstance(nxt, Mapping) else {}),
                }
            out.append(own)
        return out
    return [lane_of(info, i, n) for i in range(n)]


def lane_of(info: Mapping[str, Any], i: int, n: int) -> dict[str, Any]:
    """Lane ``i`` of an info in Gymnasium's vector layout (arrays of ``n`` with ``_key`` masks)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_") and key[1:] in info:
            continue
        mask = info.get(f"_{key}")
        if mask is not None and len(mask) == n and not mask[i]:
            continue
        if isinstance(value, Mapping):
            out[key] = lane_of(value, i, n)
        elif isinstance(value, (list, np.ndarray)) and len(value) == n:
            out[key] = value[i]
        else:
            out[key] = value
    return out


def merge(lanes: list[dict[str, Any] | None], n: int) -> dict[str, Any]:
    """Per-lane infos in Gymnasium's vector layout (``VectorEnv._add_info``, lane by lane)."""
    out: dict[str, Any] = {}
    for i, lane in enumerate(lanes):
        if lane:
            out = add_info(out, lane, i, n)
    return out


def add_info(infos: dict[str, Any], env_info: Mapping[str, Any], i: int, n: int) -> dict[str, Any]:
    """Gymnasium's ``VectorEnv._add_info`` rules: arrays of ``n`` plus a ``_key`` bool mask."""
    for key, value in env_info.items():
        if key == "final_obs":
            array = infos["final_obs"] if "final_obs" in infos else np.full(n, None, dtype=object)
            array[i] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, i, n)
        else:
            if key not in infos:
                if type(value) in (int, float, bool) or issubclass(type(value), np.number):
                    array = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            else:
                array = infos[key]
            array[i] = value
        mask = infos.get(f"_{key}", np.zeros(n, dtype=np.bool_))
        mask[i] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


def lane_array(raw: np.ndarray[Any, Any], dt: np.dtype[Any], n: int) -> np.ndarray[Any, Any]:
    """``raw`` (a reply's segment) as ``n`` lanes of ``dt``; a wrong size is a protocol error."""
    if raw.nbytes != n * dt.itemsize:
        raise ProtocolException(f"the env's step reply carries {raw.nbytes} bytes for {n} lanes")
    return raw.view(dt)


def replace_rows(last: Any, part: Any, indices: list[int]) -> Any:
    """Rows ``indices`` of ``last`` replaced by ``part`` (a fresh tree): a partial reset's batch."""
    if isinstance(part, dict):
        return {k: replace_rows(last[k], part[k], indices) for k in part}
    if isinstance(part, tuple):
        return tuple(replace_rows(a, b, indices) for a, b in zip(last, part))
    if isinstance(part, list):
        out = list(last)
        for j, i in enumerate(indices):
            out[i] = part[j]
        return out
    merged = np.array(last, copy=True)
    merged[indices] = part
    return merged


_F8 = np.dtype("<f8")
_U8 = np.dtype(np.uint8)
_BOOL = np.dtype(np.bool_)


def step_lanes(segs: Sequence[Any], k: int, n: int, no_flags: bytes) -> tuple[Any, Any, Any, Any]:
    """A vector step reply's lane arrays (the segments after the ``k`` of the observation).

    ``(rewards, terminated, truncated, done)``: ``done`` is ``None`` when no lane ended
    (both flag arrays are ``no_flags``, ``n`` zero bytes).
    """
    if len(segs) != k + 3:
        raise ProtocolException("the env's step reply carries no reward/termination lanes")
    raw_r, raw_t, raw_u = segs[k], segs[k + 1], segs[k + 2]
    if raw_r.nbytes != 8 * n or raw_t.nbytes != n or raw_u.nbytes != n:
        for raw, dt in ((raw_r, _F8), (raw_t, _U8), (raw_u, _U8)):
            lane_array(raw, dt, n)  # raises, naming the lane array that is off
    rewards = raw_r.view(_F8)
    if raw_t.tobytes() == no_flags == raw_u.tobytes():  # no lane ended
        return rewards, np.zeros(n, _BOOL), np.zeros(n, _BOOL), None
    terminated = raw_t.view(_U8) != 0  # any nonzero byte is "set"
    truncated = raw_u.view(_U8) != 0
    return rewards, terminated, truncated, terminated | truncated
