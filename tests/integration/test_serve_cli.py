"""``rlmesh serve`` / ``python -m rlmesh.serve`` (CLI-1..4, DELTA-23): endpoint shapes and failures.

Failures are checked in-process through ``rlmesh.cli.main(argv)`` (STYLE: test CLIs
through ``main``); endpoints that must keep serving run in a child process.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import rlmesh.numpy as rnp
from rlmesh import cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_num_envs_serves_independent_NEXT_STEP_lanes_by_default(serve_process):
    # issue 12 (DESIGN): lanes autoreset like gymnasium.make_vec unless told otherwise
    _, address = serve_process("CartPole-v1", "--num-envs", "3")
    with rnp.RemoteVectorEnv(address) as envs:
        assert envs.num_envs == 3
        assert envs.autoreset_mode == "NextStep"  # DELTA-23: lanes, autoresetting like make_vec
        assert envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        assert envs.env_contract.id == "CartPole-v1"
        obs, info = envs.reset(seed=0)
        assert obs.shape == (3, 4)
        assert len(set(info["episode_ids"])) == 3


def test_vectorization_mode_sync_serves_a_NEXT_STEP_gymnasium_vector_env(serve_process):
    _, address = serve_process("CartPole-v1", "--num-envs", "2", "--vectorization-mode", "sync")
    with rnp.RemoteVectorEnv(address) as envs:
        assert envs.num_envs == 2
        assert envs.autoreset_mode == "NextStep"
        assert envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        obs, _ = envs.reset(seed=1)
        assert obs.shape == (2, 4)


def test_a_module_attr_factory_with_kwargs_json_is_served(serve_process):
    _, address = serve_process("integration_envs:make_countdown", "--kwargs-json", '{"length": 2}')
    with rnp.RemoteEnv(address) as env:
        env.reset()
        env.step(0)
        _, _, terminated, _, _ = env.step(0)
        assert terminated is True  # length=2 reached the factory


def test_serve_without_a_target_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["serve"])
    assert info.value.code == 2
    assert "TARGET" in capsys.readouterr().err


def test_a_reserved_binding_key_in_kwargs_json_is_a_usage_error_pointing_at_the_flag(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(
            ["serve", "CartPole-v1", "--kwargs-json", '{"num_envs": 2}', "--address", "127.0.0.1:0"]
        )
    assert info.value.code == 2
    assert "--num-envs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["NoSuchEnv-v9", "--address", "127.0.0.1:0"], "NoSuchEnv"),
        (
            ["CartPole-v1", "--kwargs-json", "[1]", "--address", "127.0.0.1:0"],
            "must be a JSON object",
        ),
        (["CartPole-v1", "--address", "ftp://127.0.0.1:1"], "unsupported address scheme 'ftp'"),
    ],
    ids=["unknown-id", "kwargs-not-an-object", "bad-address"],
)
def test_serve_errors_exit_1_with_one_error_line(capsys, argv, message):
    assert cli.main(["serve", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: ") and message in err[0]


def test_serve_on_an_address_in_use_exits_1_naming_BindFailed(serve, capsys):
    from integration_envs import CountdownEnv

    server = serve(CountdownEnv(2))
    assert cli.main(["serve", "CartPole-v1", "--address", server.address]) == 1
    assert "BindFailed: failed to bind" in capsys.readouterr().err


def test_unknown_commands_and_no_command_exit_2(capsys):
    assert cli.main(["bogus"]) == 2
    assert cli.main([]) == 2
    assert "unknown command 'bogus'" in capsys.readouterr().err
