"""Small policies used by the examples and `make demo`."""

from __future__ import annotations

from typing import Any


def lean_policy(obs: Any) -> int:
    """CartPole heuristic: push toward the side the pole is falling to."""
    return int(obs[2] + 0.5 * obs[3] > 0)
