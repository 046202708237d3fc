"""Vector step and reset info as the seeds describe it: values as the metadata codec unwraps them.

The seeds (``rlmesh.sanitize_metadata``: "NumPy scalars/arrays ... are unwrapped the way the
codec does (_asdict / tolist / item)") say an info value travels as plain data. The vector
clients of the seed flavours (``rlmesh``, ``rlmesh.numpy``, ``rlmesh.torch``,
``rlmesh.jax`` ``RemoteVectorEnv``) therefore hand a numpy array of the env's info over as a
list and a numpy scalar as a Python number, so ``info["actions"] == [0, 0]`` is a plain
comparison. ``rlmesh.gymnasium`` keeps Gymnasium's own vector-info layout (arrays with
``_key`` masks) and the scalar clients keep arrays as arrays (docs/differences.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["plain_info"]


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with every numpy array a (nested) list and every numpy scalar a Python scalar.

    >>> plain_info({"actions": np.asarray([0, 1]), "n": np.int64(2), "lanes": [{"x": np.float32(0.5)}]})
    {'actions': [0, 1], 'n': 2, 'lanes': [{'x': 0.5}]}
    """
    return {k: _plain(v) for k, v in info.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if type(value) is dict:
        return {k: _plain(v) for k, v in value.items()}
    if type(value) is list:
        return [_plain(v) for v in value]
    return value
