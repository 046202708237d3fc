"""``rlmesh eval`` through ``eval_main(argv)`` (a thin CLI over rlmesh.run)."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from rlmesh._cli.eval import main as eval_main, parse_seeds, resolve_env_arg


def test_random_model_on_a_gymnasium_id_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    code = eval_main(
        ["random", "CartPole-v1", "--seeds", "1..3", "--max-episode-steps", "5", "--json", str(out)]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["result"]["num_episodes"] == 3
    assert [e["seed"] for e in doc["result"]["episodes"]] == [1, 2, 3]
    assert all(e["steps"] <= 5 for e in doc["result"]["episodes"])
    text = capsys.readouterr().out
    # stdout is not a TTY: a line per episode, each ending in the run's progress line
    assert "episode #2: seed=3 steps=5 " in text and "| episodes 3/3 | " in text
    assert "ETA" in text
    assert "3 episodes" in text


def test_a_module_attr_model_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_eval_targets.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            import rlmesh.models

            model = rlmesh.models.NumpyModel(lambda obs: int(obs[2] > 0))

            def make_env():
                return gym.make("CartPole-v1")
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = eval_main(
        ["my_eval_targets:model", "my_eval_targets:make_env", "--episodes", "2", "--no-progress"]
    )
    assert code == 0
    assert "2 episodes" in capsys.readouterr().out
    sys.modules.pop("my_eval_targets", None)


def test_errors_print_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_main(["no_such_module_xyz:thing", "CartPole-v1"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["ModuleNotFoundError: No module named 'no_such_module_xyz'"]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_main(["random"]) == 2
    assert eval_main(["random", "CartPole-v1", "--episodes", "x"]) == 2


def test_seed_tokens_accept_ints_lists_and_ranges() -> None:
    assert parse_seeds(["1", "4..6", "9,10"]) == [1, 4, 5, 6, 9, 10]
    with pytest.raises(ValueError, match="empty seed range"):
        parse_seeds(["5..1"])


@pytest.mark.parametrize(
    "address", ["127.0.0.1:5555", "tcp://h:1", "unix:///tmp/x.sock", "localhost:80"]
)
def test_addresses_are_passed_through_undialed(address: str) -> None:
    assert resolve_env_arg(address) == (address, False)


def test_the_episode_log_and_the_rich_table_render_to_the_given_stream() -> None:
    import io

    from rlmesh._cli._eval_report import EpisodeLog, print_results as _print_results
    from rlmesh.eval._results import EpisodeResult, RunResult

    out = io.StringIO()
    log = EpisodeLog(2, out)
    log.on_run_start(None)
    result = RunResult(
        (
            EpisodeResult(0, 1, 5, 5.0, True, False, True),
            EpisodeResult(1, 2, 3, 3.0, True, False, False),
        )
    )
    for ep in result.episodes:
        log.on_episode_end(ep)
    log.on_run_end(result)
    _print_results(result, out, rich_ok=True, rate=0.5)
    text = out.getvalue()
    assert "episode #1: seed=2 steps=3 reward=3.000 success=False | episodes 2/2 | " in text
    assert "success 50% (95% CI" in text
    assert "rlmesh eval" in text and "mean reward 4.000" in text
    quiet = io.StringIO()
    log = EpisodeLog(2, quiet, quiet=True)
    log.on_episode_end(result.episodes[0])
    assert quiet.getvalue() == ""


def _table_indices(text: str) -> list[str]:
    """The "#" column of the plain results table (rows after the header)."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "seed"])
    rows = [line.split() for line in lines[head + 1 :] if len(line.split()) == 10]
    return [r[0] for r in rows]


def test_the_progress_line_and_the_table_number_episodes_alike(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert eval_main(["random", "CartPole-v1", "--seeds", "5..7", "--max-episode-steps", "3"]) == 0
    text = capsys.readouterr().out
    progress = re.findall(r"episode #(\d+): .*? \| episodes (\d+)/3 \|", text)
    assert [p[0] for p in progress] == _table_indices(text) == ["0", "1", "2"]
    assert [p[1] for p in progress] == ["1", "2", "3"]
    assert re.search(r"ETA \d+:\d\d", text)  # the total is known: seeds


@pytest.mark.parametrize("bad", [["x"], ["3..1"], ["1..y"]])
def test_seed_parse_errors_are_usage_errors(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert eval_main(["random", "CartPole-v1", "--seeds", *bad]) == 2
    err = capsys.readouterr().err
    assert "usage: rlmesh eval" in err and "--seeds" in err and "A..B" in err


def test_env_kwargs_must_be_a_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_main(["random", "CartPole-v1", "--env-kwargs", "{nope"]) == 2
    assert eval_main(["random", "CartPole-v1", "--env-kwargs", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err


def test_env_kwargs_and_render_mode_reach_gymnasium_make() -> None:
    env, built = resolve_env_arg(
        "CartPole-v1", {"render_mode": "rgb_array", "max_episode_steps": 7}
    )
    try:
        assert built and env.render_mode == "rgb_array" and env.spec.max_episode_steps == 7
    finally:
        env.close()
    with pytest.raises(ValueError, match="where it is served"):
        resolve_env_arg("127.0.0.1:5555", {"render_mode": "rgb_array"})


def test_json_is_to_dict_plus_the_success_signal(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        eval_main(["random", "CartPole-v1", "--seeds", "0..2", "--no-progress", "--json", str(out)])
        == 0
    )
    doc = json.loads(out.read_text())["result"]
    assert doc.pop("success_signal") is False
    assert (
        doc["success_rate"] == 1.0
    )  # the API's value: the terminated fallback (a random CartPole falls)
    assert set(doc) == {
        "num_episodes",
        "total_steps",
        "mean_reward",
        "success_rate",
        "reported_success_rate",
        "episodes",
        "telemetry",
        "advisories",
    }


def test_a_policy_exception_names_the_policy_and_the_observation_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_bad_policy.py").write_text(
        textwrap.dedent(
            """
            def policy(obs):
                return obs["image"]  # CartPole gives an array, not a dict
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert eval_main(["my_bad_policy:policy", "CartPole-v1", "--no-progress"]) == 1
    finally:
        sys.modules.pop("my_bad_policy", None)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1  # no traceback without --verbose
    assert "the policy 'my_bad_policy:policy' raised IndexError" in err
    assert "my_bad_policy.py:3 in policy" in err
    assert "float32[4]" in err and "Box(" in err  # the input it got and the env's observation space


def test_an_env_exception_is_not_blamed_on_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_bad_env.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym

            class Broken(gym.Wrapper):
                def step(self, action):
                    raise RuntimeError("the simulator crashed")

            def make():
                return Broken(gym.make("CartPole-v1"))
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert eval_main(["random", "my_bad_env:make", "--no-progress"]) == 1
    finally:
        sys.modules.pop("my_bad_env", None)
    err = capsys.readouterr().err
    assert "the simulator crashed" in err and "policy" not in err


def test_view_on_a_gymnasium_id_builds_it_with_rgb_array(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--view`` needs frames: a Gymnasium id is made with render_mode="rgb_array" unless told otherwise."""
    import rlmesh._cli.eval as cli
    from rlmesh.eval._results import RunResult

    seen: dict[str, object] = {}

    def fake_run(model: object, env: object, **kw: object) -> RunResult:
        seen["render_mode"] = getattr(env, "render_mode", None)
        seen["view"] = kw["view"]
        env.close()  # type: ignore[attr-defined]
        return RunResult(())

    monkeypatch.setattr(cli, "run", fake_run)
    assert eval_main(["random", "CartPole-v1", "--view", "http:9", "--no-progress"]) == 0
    assert seen["render_mode"] == "rgb_array" and seen["view"] is not None
    assert (
        eval_main(
            ["random", "CartPole-v1", "--view", "http:9", "--render-mode", "human", "--no-progress"]
        )
        == 0
    )
    assert seen["render_mode"] == "human"
    assert eval_main(["random", "CartPole-v1", "--no-progress"]) == 0
    assert seen["render_mode"] is None and seen["view"] is None
