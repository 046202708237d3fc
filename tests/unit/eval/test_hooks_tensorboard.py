"""``rlmesh.hooks.TensorBoard``: episode metrics land in a TensorBoard event file (issue 29 item 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require
from rlmesh.numpy import Model


class Alternating:
    """Episode k lasts k+2 steps, reward 1 per step, and succeeds when k is even."""

    metadata: dict[str, Any] = {}

    def __init__(self) -> None:
        import gymnasium as gym

        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = -1
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.episode += 1
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.episode + 2
        info = {"is_success": self.episode % 2 == 0} if done else {}
        return np.zeros(2, np.float32), 1.0, done, False, info

    def close(self) -> None:
        pass


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {
        tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def test_episode_metrics_are_read_back_from_the_event_file(tmp_path: Path) -> None:
    require("tensorboard")
    import rlmesh.hooks

    with rlmesh.hooks.TensorBoard(tmp_path / "tb") as tb:
        result = rlmesh.run(Model(lambda obs: 0), Alternating(), max_episodes=4, hooks=tb)
        rlmesh.run(
            Model(lambda obs: 0), Alternating(), max_episodes=1, hooks=tb
        )  # the step axis keeps counting
    assert result.num_episodes == 4
    got = _scalars(tmp_path / "tb")
    assert got["episode/return"] == [(0, 2.0), (1, 3.0), (2, 4.0), (3, 5.0), (4, 2.0)]
    assert got["episode/length"] == [(0, 2.0), (1, 3.0), (2, 4.0), (3, 5.0), (4, 2.0)]
    assert got["episode/success"] == [(0, 1.0), (1, 0.0), (2, 1.0), (3, 0.0), (4, 1.0)]
    assert got["episode/success_rate"] == [(0, 1.0), (1, 0.5), (2, 0.666667), (3, 0.5), (4, 0.6)]
    assert got["run/success_rate"] == [(3, 0.5), (4, 1.0)]
    assert got["run/mean_reward"] == [(3, 3.5), (4, 2.0)]
    assert len(got["episode/duration_s"]) == 5


def test_no_success_signal_logs_no_success_scalar_but_the_fallback_rate(tmp_path: Path) -> None:
    require("tensorboard")
    gym = require("gymnasium")
    from rlmesh.hooks import TensorBoard

    tb = TensorBoard(tmp_path, prefix="eval")
    result = rlmesh.run(rlmesh.RANDOM_SAMPLE, gym.make("CartPole-v1"), seeds=[0, 1], hooks=tb)
    tb.close()
    tb.close()  # idempotent
    got = _scalars(tmp_path)
    assert "eval/success" not in got
    assert [v for _, v in got["eval/return"]] == [e.reward for e in result.episodes]
    assert got["eval/success_rate"][-1][1] == 1.0  # RunResult.success_rate's terminated fallback
    with pytest.raises(RuntimeError, match="closed"):
        rlmesh.run(rlmesh.RANDOM_SAMPLE, gym.make("CartPole-v1"), seeds=[0], hooks=tb)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    require("tensorboard")
    from rlmesh.hooks import TensorBoard

    with pytest.raises(ValueError, match="prefix"):
        TensorBoard(tmp_path, prefix="")


@pytest.mark.slow  # a fresh interpreter
def test_rlmesh_hooks_loads_on_first_use_and_tensorboard_only_when_constructed() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rlmesh\n"
        "assert 'rlmesh.hooks' not in sys.modules\n"
        "hooks = rlmesh.hooks\n"
        "assert hooks.TensorBoard.__name__ == 'TensorBoard'\n"
        "assert 'tensorboard' not in sys.modules, 'imported at import time'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
