"""``rlmesh eval`` through ``eval_main(argv)`` (a thin CLI over rlmesh.run)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from rlmesh.eval._cli import eval_main, parse_seeds, resolve_env_arg


def test_random_model_on_a_gymnasium_id_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    assert "episode 3/3" in text  # plain progress lines when stdout is not a TTY
    assert "3 episodes" in text


def test_a_module_attr_model_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
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
    code = eval_main(["my_eval_targets:model", "my_eval_targets:make_env", "--episodes", "2", "--no-progress"])
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


@pytest.mark.parametrize("address", ["127.0.0.1:5555", "tcp://h:1", "unix:///tmp/x.sock", "localhost:80"])
def test_addresses_are_passed_through_undialed(address: str) -> None:
    assert resolve_env_arg(address) == (address, False)


def test_rich_progress_and_table_render_to_the_given_stream() -> None:
    import io

    from rlmesh.eval._cli import _print_results, _Progress
    from rlmesh.eval._results import EpisodeResult, RunResult

    out = io.StringIO()
    progress = _Progress(2, out, rich_ok=True)
    progress.on_run_start(None)
    result = RunResult((EpisodeResult(0, 1, 5, 5.0, True, False, True), EpisodeResult(1, 2, 3, 3.0, True, False, False)))
    for ep in result.episodes:
        progress.on_episode_end(ep)
    progress.on_run_end(result)
    _print_results(result, out, rich_ok=True, rate=0.5)
    text = out.getvalue()
    assert "2/2" in text and "success 50%" in text
    assert "rlmesh eval" in text and "mean reward 4.000" in text
