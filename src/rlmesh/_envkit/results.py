"""How an env's results read, for every driver: normalised reset/step results and lane slices (ENVCALL-2/3, AR-6/7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "lane_final_info",
    "lane_info",
    "next_step_violation",
    "normalize_reset",
    "normalize_step",
    "read_scalar_step",
    "read_vector_step",
]


def normalize_reset(result: Any) -> tuple[Any, dict[str, Any]]:
    """ENVCALL-2 / EVAL-12: ``(obs, info)`` when a 2-tuple ends in a Mapping/None, else a bare obs.

    Any ``Mapping`` counts as info (a read-only ``types.MappingProxyType`` too); the
    info comes back as a fresh ``dict``.
    """
    if type(result) is tuple and len(result) == 2:
        info = result[1]
        if type(info) is dict:
            return result[0], info
        if info is None or isinstance(info, Mapping):
            return result[0], dict(info or {})
    elif (
        isinstance(result, tuple)
        and len(result) == 2
        and (result[1] is None or isinstance(result[1], Mapping))
    ):
        return result[0], dict(result[1] or {})
    return result, {}


def normalize_step(result: Any, lanes: int | None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """ENVCALL-3: 5-tuple, or the legacy 4-tuple ``(obs, reward, done, info)``.

    ``lanes`` is ``None`` for a scalar env, N for a vector env. ``info`` may be any
    ``Mapping`` (returned as a ``dict``); reward and flags are returned as the env gave them.
    """
    if not isinstance(result, tuple) or len(result) not in (4, 5):
        n = len(result) if isinstance(result, tuple) else 1
        raise ValueError(
            f"env.step() must return 4 legacy Gym values or 5 Gymnasium values, got {n}"
        )
    if len(result) == 5:
        obs, reward, terminated, truncated, info = result
    else:
        obs, reward, done, info = result
        info = info or {}
        tl = info.get("TimeLimit.truncated", False) if isinstance(info, Mapping) else False
        if lanes is None:
            truncated = bool(done) and bool(tl)
            terminated = bool(done) and not truncated
        else:
            d = np.asarray(done, dtype=bool).reshape(-1)
            t = np.broadcast_to(np.asarray(tl, dtype=bool), d.shape)
            truncated, terminated = d & t, d & ~t
    if type(info) is not dict:
        info = dict(info) if isinstance(info, Mapping) else (dict(info) if info else {})
    return obs, reward, terminated, truncated, info


def read_scalar_step(result: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """One env's step result as every driver reads it: reward a ``float``, flags ``bool`` (ENVCALL-3).

    Raises:
        ValueError / TypeError: a result of the wrong arity, a reward that is no
            number, a flag with no truth value (callers word it with :func:`env_failure`).
    """
    obs, reward, terminated, truncated, info = normalize_step(result, None)
    return obs, float(reward), bool(terminated), bool(truncated), info


def read_vector_step(result: Any, n: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """A vector env's step result: rewards float64, flags bool, each of length ``n`` (AR-6: empty reads as 0).

    Raises:
        ValueError / TypeError: as :func:`read_scalar_step`, or a vector of the wrong length.
    """
    obs, reward, terminated, truncated, info = normalize_step(result, n)
    return (
        obs,
        _lanes(reward, np.float64, n),
        _lanes(terminated, bool, n),
        _lanes(truncated, bool, n),
        info,
    )


def _lanes(x: Any, dtype: Any, n: int) -> np.ndarray[Any, Any]:
    if type(x) is np.ndarray and x.dtype == dtype and x.shape == (n,):
        return x  # what a gymnasium vector env returns
    arr = np.asarray(x, dtype=dtype).reshape(-1)
    if arr.size == 0:
        return np.zeros(n, dtype=dtype)  # AR-6: empty vectors read as 0/false
    if arr.size != n:
        raise ValueError(f"vector env returned {arr.size} values for {n} lanes")
    return arr


def lane_info(info: Mapping[str, Any] | None, lane: int, n: int) -> dict[str, Any]:
    """One lane's slice of a batched vector info dict (gymnasium ``key`` / ``_key`` mask layout).

    ``_``-prefixed mask keys are dropped; a key whose ``_key`` mask is false for
    ``lane`` is dropped; nested mappings are sliced the same way; arrays, lists and
    tuples of length ``n`` give their ``lane`` entry; anything else is kept whole.
    The one slicer for every driver (DELTA-15, AR-7, EVAL-66).
    """
    if not info:
        return {}
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(key, str) and key.startswith("_"):
            continue
        mask = info.get("_" + key) if isinstance(key, str) else None
        if mask is not None and not _lane_flag(mask, lane):
            continue
        if isinstance(value, Mapping):
            out[key] = lane_info(value, lane, n)
        elif (isinstance(value, (list, tuple)) and len(value) == n) or (
            isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == n
        ):
            out[key] = value[lane]
        else:
            out[key] = value
    return out


def lane_final_info(info: Mapping[str, Any] | None, lane: int, n: int) -> dict[str, Any]:
    """AR-7: the info a lane's episode ended with.

    A ``final_info`` entry (gymnasium's SAME_STEP layout, a list of per-lane dicts or
    a batched dict) wins over the step's own info; a lane whose ``_final_info`` mask
    is false has none. Otherwise the lane's slice of the step info.
    """
    sliced = lane_info(info, lane, n)
    final = sliced.get("final_info")
    if isinstance(final, Mapping):
        return dict(final)
    if info and "final_info" in info and "final_info" not in sliced:
        return {}  # masked out for this lane
    return sliced


def _lane_flag(mask: Any, lane: int) -> bool:
    try:
        return bool(np.asarray(mask).reshape(-1)[lane])
    except IndexError:
        return False


def next_step_violation(lane: int) -> str:
    """AR-6: the message for a NEXT_STEP autoreset step that paid reward or reported done.

    The served driver sends it as ``[INTERNAL] step failed: ...`` (fatal); in-process
    sessions raise the same :class:`~rlmesh.errors.EnvironmentException`.
    """
    return (
        f"NEXT_STEP autoreset contract violated on lane {lane}: the autoreset "
        "step must report reward 0 and not done"
    )
