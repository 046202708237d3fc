"""MOD-37: a vector route refuses a model whose per-lane forward keeps hidden state.

One model object answers every lane; state carried from one call to the next would
interleave across lanes. The probe replays a sampled input around a different one and
compares the drift with the model's own back-to-back noise (x8, atol 1e-6).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from eval_envs import CountEnv, counting_vector

import rlmesh.eval as ev
from rlmesh.models import NumpyModel


class Drifting(NumpyModel[Any, Any]):
    """Per-lane chunk corner that remembers the previous observation: hidden state."""

    def __init__(self) -> None:
        super().__init__()
        self.previous = 0.0

    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        out = np.tanh(float(obs[0]) * 1e-9) + 0.1 * np.tanh(self.previous * 1e-9)
        self.previous = float(obs[0])
        return np.full((horizon, 1), out, np.float32)


class Stateless(NumpyModel[Any, Any]):
    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        return np.full((horizon, 1), np.tanh(float(obs[0])), np.float32)


class DriftingWithContext(NumpyModel[Any, Any]):
    """Same drift, but the corner takes the episode context: its state is explicit."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.previous = 0.0

    def predict_chunk(self, obs: Any, horizon: int, context: Any) -> Any:
        self.calls += 1
        out = float(obs[0]) + 0.1 * self.previous
        self.previous = float(obs[0])
        return np.full((horizon, 1), np.tanh(out), np.float32)


def test_mod_37_a_stateful_model_fails_a_vector_route() -> None:
    with pytest.raises(ValueError, match=r"keeps hidden state between predict calls \(MOD-37\)"):
        ev.run(Drifting(), counting_vector(2, length=4), max_episodes=2, execution_horizon=2)


def test_mod_37_a_stateless_model_runs_on_a_vector_route() -> None:
    result = ev.run(Stateless(), counting_vector(2, length=4), max_episodes=2, execution_horizon=2)
    assert [e.steps for e in result.episodes] == [4, 4]


def test_mod_37_the_same_stateful_model_runs_on_a_single_env() -> None:
    result = ev.run(Drifting(), CountEnv(length=4), execution_horizon=2)
    assert result.episodes[0].steps == 4


def test_mod_37_a_context_taking_corner_is_not_probed() -> None:
    model = DriftingWithContext()
    result = ev.run(model, counting_vector(2, length=4), max_episodes=2, execution_horizon=2)
    assert [e.steps for e in result.episodes] == [4, 4]
    assert model.calls == 4  # 2 lanes x 2 chunks, no probe forwards
