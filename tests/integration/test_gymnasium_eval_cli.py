"""``rlmesh eval`` surprises of issue 12: no-success-signal reporting and the MODEL/ENV targets."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import rlmesh
from rlmesh._cli.eval import main as eval_main
from rlmesh.models import NumpyModel
from rlmesh.serve import ModelServer

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::UserWarning")]

TARGETS = """
import gymnasium as gym
import rlmesh.models

model = rlmesh.models.NumpyModel(lambda obs: int(obs[2] > 0))

def make_env():
    return gym.make("CartPole-v1")
"""


def test_without_a_success_signal_the_table_and_json_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert (
        eval_main(["random", "CartPole-v1", "--seeds", "0..2", "--no-progress", "--json", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "no success signal" in text and "terminated 100.0%" in text
    )  # random CartPole always falls
    assert "success rate 100" not in text
    doc = json.loads(out.read_text())["result"]
    # the JSON is to_dict(): the API's success_rate (the terminated fallback), flagged as such
    assert doc["success_rate"] == 1.0 and doc["success_signal"] is False


def test_the_python_api_keeps_the_seeds_fallback_and_warning() -> None:
    import gymnasium as gym

    result = rlmesh.run(rlmesh.RANDOM_SAMPLE, gym.make("CartPole-v1"), seeds=[0])
    with pytest.warns(UserWarning, match="no episode reported a task-outcome"):
        assert result.success_rate == 1.0


def test_path_to_file_targets_work_for_model_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pkgdir").mkdir()
    (tmp_path / "pkgdir" / "gym_eval_file_targets.py").write_text(textwrap.dedent(TARGETS))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = "../pkgdir/gym_eval_file_targets.py"
    assert eval_main([f"{path}:model", f"{path}:make_env", "--episodes", "2", "--no-progress"]) == 0
    assert "2 episodes" in capsys.readouterr().out
    sys.modules.pop("gym_eval_file_targets", None)


def test_module_attr_resolves_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gym_eval_cwd_targets.py").write_text(textwrap.dedent(TARGETS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert (
        eval_main(["gym_eval_cwd_targets:model", "CartPole-v1", "--episodes", "1", "--no-progress"])
        == 0
    )
    assert "1 episodes" in capsys.readouterr().out
    sys.modules.pop("gym_eval_cwd_targets", None)


def test_a_served_model_address_is_accepted_as_model(capsys: pytest.CaptureFixture[str]) -> None:
    server = ModelServer(NumpyModel(lambda obs: int(obs[2] > 0)), "127.0.0.1:0").start()
    try:
        assert eval_main([server.address, "CartPole-v1", "--seeds", "0", "1", "--no-progress"]) == 0
    finally:
        server.shutdown()
    assert "2 episodes" in capsys.readouterr().out


def _balance(obs):
    return int(obs[2] > 0)


class _BatchBalance(NumpyModel):
    def predict_batch(self, obs):
        return (obs[:, 2] > 0).astype("int64")


def test_a_default_next_step_lanes_endpoint_still_takes_per_episode_seeds_and_caps() -> None:
    """DELTA-49 survives the NEXT_STEP default: the runtime resets single lanes of a lanes endpoint."""
    import gymnasium as gym

    seeds = [1, 2, 3, 4, 5]
    server = rlmesh.EnvServer([gym.make("CartPole-v1") for _ in range(2)], "127.0.0.1:0").start()
    try:
        remote = rlmesh.run(_BatchBalance(), server.address, seeds=seeds, max_episode_steps=30)
    finally:
        server.shutdown()
    local = rlmesh.run(
        NumpyModel(_balance), gym.make("CartPole-v1"), seeds=seeds, max_episode_steps=30
    )
    assert sorted((e.seed, e.steps, e.truncated) for e in remote.episodes) == sorted(
        (e.seed, e.steps, e.truncated) for e in local.episodes
    )


def test_a_served_next_step_gymnasium_vector_env_resets_lanes_for_seeds_and_caps() -> None:
    """AR-10: a served NEXT_STEP Gymnasium vector env honours env_indices (reset_mask), as in-process."""
    import gymnasium as gym

    def make() -> gym.vector.VectorEnv:
        return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")

    server = rlmesh.EnvServer(make(), "127.0.0.1:0").start()
    try:
        served = rlmesh.run(
            _BatchBalance(), server.address, seeds=[1, 2, 3, 4], max_episode_steps=30
        )
    finally:
        server.shutdown()
    local = rlmesh.run(_BatchBalance(), make(), seeds=[1, 2, 3, 4], max_episode_steps=30)
    assert [(e.seed, e.steps, e.truncated) for e in served.episodes] == [
        (e.seed, e.steps, e.truncated) for e in local.episodes
    ]
    assert sorted(e.seed for e in served.episodes) == [1, 2, 3, 4]


def test_eval_drives_a_gymnasium_remote_vector_env_with_reset_masks() -> None:
    import gymnasium as gym

    import rlmesh.gymnasium as rg

    seeds = [1, 2, 3, 4, 5]
    server = rlmesh.EnvServer([gym.make("CartPole-v1") for _ in range(2)], "127.0.0.1:0").start()
    try:
        with rg.RemoteVectorEnv(server.address) as envs:
            remote = rlmesh.run(_BatchBalance(), envs, seeds=seeds, max_episode_steps=30)
    finally:
        server.shutdown()
    local = rlmesh.run(
        NumpyModel(_balance), gym.make("CartPole-v1"), seeds=seeds, max_episode_steps=30
    )
    assert sorted((e.seed, e.steps) for e in remote.episodes) == sorted(
        (e.seed, e.steps) for e in local.episodes
    )
