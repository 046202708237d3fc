"""MOD-37: a vector route refuses a model that keeps hidden state between forwards.

One model object answers every lane of a vector env, so state a model carries from one
``predict`` to the next would interleave across lanes. :func:`probe_hidden_state` runs
once, when a :class:`~rlmesh.models._local.LocalRoute` binds to more than one lane.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._bridge import NUMPY
from ..spaces import space_from_spec
from ..spaces._gym import as_spec
from ._values import to_numpy_tree

if TYPE_CHECKING:
    from ._local import LocalRoute

__all__ = ["probe_hidden_state"]

#: MOD-37 drift tolerance: ``max(noise_floor * 8, 1e-6)``.
_PROBE_NOISE_FACTOR = 8.0
_PROBE_ATOL = 1e-6


def _numeric_leaves(value: Any) -> np.ndarray[Any, Any] | None:
    """All numeric leaves of an output, flattened to float64 (``None``: not comparable)."""
    out: list[np.ndarray[Any, Any]] = []

    def walk(v: Any) -> bool:
        if isinstance(v, Mapping):
            return all(walk(v[k]) for k in sorted(v, key=str))
        if isinstance(v, (list, tuple)) and not (
            v and all(isinstance(x, (int, float, bool)) for x in v)
        ):
            return all(walk(x) for x in v)
        try:
            out.append(np.asarray(to_numpy_tree(v), dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            return False
        return True

    if not walk(value):
        return None
    return np.concatenate(out) if out else np.zeros(0)


def probe_hidden_state(route: LocalRoute, observation_space: Any) -> None:
    """MOD-37: refuse a vector route whose model keeps hidden state between forwards.

    One model object answers every lane, so state carried from one ``predict`` to the
    next would interleave across lanes. Once per vector route: predict a sampled input
    ``a`` (warm-up), then twice more back to back (the model's own noise floor), then
    a different input ``b``, then ``a`` again; if ``a``'s output drifted by more than
    ``max(noise * 8, 1e-6)``, the route fails. Inconclusive probes pass: a corner that
    takes an episode context or a model that authors a batched corner (its state is
    explicit), spaces that cannot be sampled,
    forwards that raise on sampled inputs, non-numeric outputs, or two samples that
    the adapter maps to the same input.

    Raises:
        ValueError: the model's output for a replayed input depends on the inputs in between.
    """
    if route.wants_ctx or observation_space is None:
        return
    cs = route.corners
    if {"predict_batch", "predict_chunk_batch"} & set(cs.defined):
        return  # a batched corner sees every lane at once: its state is the author's explicit design
    if route.spec_less and route.horizon == 1 and cs.predict_batch is None:
        return  # DELTA-49: a spec-less predict-only model receives the whole batch in one call
    try:
        space = space_from_spec(as_spec(observation_space, "observation_space"), bridge=NUMPY)
        space.seed(0)
        raw_a, raw_b = space.sample(), space.sample()
    except Exception:
        return

    def forward(raw: Any) -> np.ndarray[Any, Any] | None:
        x = route.model_input(raw, 0)
        y = cs.predict_chunk(x, route.horizon, None) if route.chunk_mode else cs.predict(x, None)  # type: ignore[misc]
        return _numeric_leaves(y)

    try:
        forward(raw_a)  # warm: whatever the model remembers is now about ``a``
        first, again = forward(raw_a), forward(raw_a)
        other = forward(raw_b)
        replay = forward(raw_a)
    except Exception:
        return
    finally:
        for adapter in route.adapters:  # the probe's frames never reach an episode
            if adapter is not None:
                adapter.reset()
    if (
        first is None
        or again is None
        or replay is None
        or other is None
        or first.shape != replay.shape
    ):
        return
    if (
        first.shape == other.shape
        and np.array_equal(first, other)
        and np.array_equal(first, replay)
    ):
        return  # the inputs did not tell the model anything different
    noise = (
        float(np.max(np.abs(first - again))) if first.size and first.shape == again.shape else 0.0
    )
    drift = float(np.max(np.abs(replay - again))) if replay.size else 0.0
    if drift > max(noise * _PROBE_NOISE_FACTOR, _PROBE_ATOL):
        name = type(route.model).__name__
        raise ValueError(
            f"{name} keeps hidden state between predict calls (MOD-37): replaying an input after a "
            f"different one changed its output by {drift:.3g} (its own back-to-back noise is {noise:.3g}). "
            "A vector route shares one model object across lanes, so that state would interleave -- keep "
            "per-episode state in the episode context (predict(obs, ctx)) or run with num_envs=1"
        )
