"""Models served by the integration tests (importable as ``served_models:...`` in subprocesses)."""

from __future__ import annotations

from typing import Any

from rlmesh.numpy import Model


def lean(obs: Any) -> int:
    """CartPole heuristic."""
    return int(obs[2] + 0.5 * obs[3] > 0)


class Lean(Model):
    """Records every episode end it is told about."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[str] = []

    def predict(self, obs: Any) -> int:
        return lean(obs)

    def on_episode_end(self, episode_id: str = "") -> None:
        self.ends.append(episode_id)


class Broken(Model):
    def predict(self, obs: Any) -> int:
        raise ZeroDivisionError("the policy divided by zero")


class Chunky(Model):
    """Returns 4-step chunks; counts forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def predict_chunk(self, obs: Any, execution_horizon: int = 1) -> Any:
        self.calls += 1
        return [lean(obs)] * 4


def zero(obs: Any) -> int:
    """``served_models:zero``: a bare predict callable (served wrapped in ``rlmesh.numpy.Model``)."""
    return 0
