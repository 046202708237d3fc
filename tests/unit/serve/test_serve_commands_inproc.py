"""``serve_env`` and ``python -m rlmesh.serve``'s ``main`` in process, and the helpers every serve command shares.

Blocking calls run on the test's own (main) thread; a helper thread waits until the
endpoint answers, then sends this process SIGINT, which the server turns into a
graceful stop. Arguments that are misuse exit with status 2 before anything is built.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from serve_wire import ScriptedEnv, Wire, no_threads_left_fixture, short_dir_fixture  # noqa: F401  (fixtures)

from rlmesh._cli import _serving
from rlmesh._spawn import recipe
from rlmesh.authoring import EnvFactory
from rlmesh.errors import BindFailed
from rlmesh.numpy import Model
from rlmesh.serve import EnvServer, ServeOptions, _command, main, serve_env
from rlmesh.wire import messages as m

pytestmark = pytest.mark.timeout(60)


class Factory(EnvFactory):
    def make(self) -> Any:
        return ScriptedEnv()


class Zero(Model):
    def predict(self, obs: Any) -> int:
        return 0


ZERO = Zero()
LIVE = ScriptedEnv()
NOT_AN_ENV = 3


def _interrupt_when_serving(address: str) -> threading.Thread:
    """Once ``address`` answers a Ping, send this process SIGINT (the server stops gracefully)."""

    def run() -> None:
        for _ in range(1000):
            try:
                with Wire(address) as probe:
                    probe.request(m.Ping())
                break
            except OSError:
                threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_serve_env_serves_until_interrupted_and_announces_the_address(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"unix://{short_dir}/e.sock"
    helper = _interrupt_when_serving(address)
    serve_env(ScriptedEnv, address)
    helper.join(10.0)
    assert f"RLMesh serving env on {address}" in capsys.readouterr().out
    assert not os.path.exists(address[len("unix://") :])


def test_serve_env_builds_a_factory_into_lanes(short_dir: Path) -> None:
    address = f"unix://{short_dir}/f.sock"
    seen: list[int] = []

    def probe() -> None:
        for _ in range(1000):
            try:
                with Wire(address) as client:
                    seen.append(client.hello().contract["num_envs"])
                break
            except OSError:
                threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=probe, daemon=True)
    helper.start()
    serve_env(Factory, address, num_envs=2, autoreset="same-step")
    helper.join(10.0)
    assert seen == [2]


def test_serve_env_refuses_bad_counts_modes_and_vector_fanout_for_torch(short_dir: Path) -> None:
    address = f"unix://{short_dir}/x.sock"
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        serve_env(ScriptedEnv, address, num_envs=0)
    with pytest.raises(ValueError, match="vectorization_mode must be None, 'sync' or 'async'"):
        serve_env(ScriptedEnv, address, vectorization_mode="threads")
    with pytest.raises(
        NotImplementedError, match="cannot be served through a Gymnasium vector env"
    ):
        serve_env(ScriptedEnv, address, num_envs=2, vectorization_mode="sync", framework="torch")


def test_serve_env_closes_what_it_built_when_the_server_cannot_bind(short_dir: Path) -> None:
    live = ScriptedEnv()
    with pytest.raises(BindFailed):
        serve_env(live, f"unix://{short_dir}/no/such/dir.sock")
    assert live.closed == 1


def test_main_serves_an_env_target_and_writes_the_ready_file(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"unix://{short_dir}/m.sock"
    ready = short_dir / "ready"
    helper = _interrupt_when_serving(address)
    code = main(
        ["--env", "serve_wire:ScriptedEnv", "--address", address, "--ready-file", str(ready)]
    )
    helper.join(10.0)
    assert code == 0 and ready.read_text() == f"{address}\n"
    out = capsys.readouterr().out
    assert f"RLMesh serving env on {address}" in out and "WARNING" not in out


def test_main_serves_a_model_target(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = f"unix://{short_dir}/mm.sock"
    helper = _interrupt_when_serving(address)
    code = main([f"{__name__}:ZERO", "--address", address])
    helper.join(10.0)
    captured = capsys.readouterr()
    assert code == 0 and f"RLMesh serving model on {address}" in captured.out
    assert "declares no spec" in captured.err


def test_main_reports_a_target_that_fails_in_one_line_with_status_1(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "--env",
            f"{__name__}:LIVE",
            "--kwargs-json",
            '{"x": 1}',
            "--address",
            f"unix://{short_dir}/z.sock",
        ]
    )
    assert code == 1
    assert "Error: ValueError: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environ", "words"),
    [
        ([], {}, "give exactly one of a positional model TARGET or --env TARGET"),
        (["a:b", "--env", "c:d"], {}, "give exactly one"),
        (["a:b", "--framework", "torch"], {}, "--framework applies to env targets only"),
        (["--env", "a:b", "--kwargs-json", "{"], {}, "--kwargs-json must be a JSON object"),
        (["--env", "a:b", "--kwargs-json", "[1]"], {}, "got list"),
        (["--env", "a:b", "--kwargs-json", '{"num_envs": 2}'], {}, "use $RLMESH_NUM_ENVS"),
        (["--env", "a:b"], {"RLMESH_NUM_ENVS": "two"}, "RLMESH_NUM_ENVS must be an int >= 1"),
        (["--env", "a:b"], {"RLMESH_NUM_ENVS": "0"}, "RLMESH_NUM_ENVS must be an int >= 1"),
        (
            ["--env", "a:b"],
            {"RLMESH_VECTORIZATION_MODE": "threads"},
            "RLMESH_VECTORIZATION_MODE must be",
        ),
    ],
)
def test_main_misuse_is_a_usage_error_before_anything_is_built(
    argv: list[str],
    environ: dict[str, str],
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and words in capsys.readouterr().err


# -- what every serve command shares --------------------------------------------------------------


def test_the_ready_fd_gets_the_address_and_only_a_real_spare_descriptor_is_accepted() -> None:
    r, w = os.pipe()
    try:
        assert _serving.ready_fd_arg(str(w)) == w
        _serving.write_ready_fd(w, "unix:///tmp/x.sock")
        assert os.read(r, 100) == b"unix:///tmp/x.sock\n"
    finally:
        os.close(r)
    with pytest.raises(argparse.ArgumentTypeError, match="own stdout"):
        _serving.ready_fd_arg("1")
    with pytest.raises(argparse.ArgumentTypeError, match=">= 3"):
        _serving.ready_fd_arg("three")
    with pytest.raises(argparse.ArgumentTypeError, match=">= 3"):
        _serving.ready_fd_arg("-4")
    with pytest.raises(argparse.ArgumentTypeError, match="is not open"):
        _serving.ready_fd_arg(str(w))  # closed by write_ready_fd


def test_the_ready_file_replaces_a_planted_symlink_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    ready = tmp_path / "ready"
    ready.symlink_to(victim)
    _serving.write_ready_file(str(ready), "tcp://127.0.0.1:5")
    assert ready.read_text() == "tcp://127.0.0.1:5\n" and not ready.is_symlink()
    assert victim.read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_default_address_and_which_addresses_are_exposed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_ADDRESS", raising=False)
    monkeypatch.setenv("RLMESH_PORT", "6000")
    assert _serving.default_address() == "127.0.0.1:6000"
    monkeypatch.setenv("RLMESH_ADDRESS", "unix:///run/x.sock")
    assert _serving.default_address() == "unix:///run/x.sock"
    assert not _serving.exposed("unix:///run/x.sock")
    assert not _serving.exposed("tcp://127.0.0.1:5") and not _serving.exposed("tcp://[::1]:5")
    assert not _serving.exposed("tcp://localhost:5")
    assert _serving.exposed("tcp://0.0.0.0:5") and _serving.exposed("tcp://example.org:5")


def test_startup_marks_are_milliseconds_from_process_start() -> None:
    _command.mark_startup("imports")
    marks = _command.startup_marks()
    assert float(marks["rlmesh.startup.imports_ms"]) > 0
    assert _command.startup_text().startswith(" (startup: ")


def test_serve_until_stopped_prints_why_and_returns_the_exit_status(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = EnvServer(
        ScriptedEnv(), f"unix://{short_dir}/i.sock", options=ServeOptions(idle_timeout_seconds=0.05)
    )
    assert _serving.serve_until_stopped(server) == 0
    assert "RLMesh server stopped (idle timeout)" in capsys.readouterr().out


def test_run_command_maps_outcomes_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    quiet = argparse.Namespace(verbose=False)

    def boom() -> int:
        raise ValueError("bad\nthing")

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert _serving.run_command(quiet, lambda: 0) == 0
    assert _serving.run_command(quiet, interrupted) == 130
    assert _serving.run_command(quiet, boom) == 1
    assert capsys.readouterr().err.startswith("Error: ValueError: bad")
    assert _serving.run_command(argparse.Namespace(verbose=True), boom) == 1
    assert "Traceback" in capsys.readouterr().err


def test_bindings_options_and_the_announcement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(kwargs_json='{"a": 1}', param=["b=2", "c=text", "d=[1, 2]"])
    assert _serving.binding_of(args) == {"a": 1, "b": 2, "c": "text", "d": [1, 2]}
    with pytest.raises(ValueError, match="must be a JSON object"):
        _serving.binding_of(argparse.Namespace(kwargs_json="[1]", param=[]))
    with pytest.raises(ValueError, match="--param takes KEY=VALUE"):
        _serving.binding_of(argparse.Namespace(kwargs_json=None, param=["novalue"]))
    options = _serving.options_of(
        argparse.Namespace(allow_remote_shutdown=True, idle_timeout=3.0, workflow_edition=None)
    )
    assert options.allow_remote_shutdown and options.idle_timeout_seconds == 3.0
    r, w = os.pipe()
    ready = tmp_path / "ready"
    _serving.announce(
        argparse.Namespace(ready_fd=w, ready_file=str(ready)), "env", "tcp://0.0.0.0:7"
    )
    try:
        assert os.read(r, 100) == b"tcp://0.0.0.0:7\n"
    finally:
        os.close(r)
    assert ready.read_text() == "tcp://0.0.0.0:7\n"
    assert "reachable from other hosts" in capsys.readouterr().out


def test_env_targets_load_from_ids_module_attrs_factories_and_instances() -> None:
    env, factory = recipe.load_env_target("CartPole-v1")
    assert env.spec.id == "CartPole-v1" and factory is None
    lanes, _ = recipe.load_env_target("CartPole-v1", num_envs=2, autoreset="same-step")
    assert len(lanes) == 2 and lanes.autoreset_mode == "SameStep"
    venv, _ = recipe.load_env_target("CartPole-v1", num_envs=2, vectorization_mode="sync")
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    venv.close()
    env, factory = recipe.load_env_target(f"{__name__}:Factory")
    assert isinstance(env, ScriptedEnv) and isinstance(factory, Factory)
    assert recipe.load_env_target(f"{__name__}:LIVE")[0] is LIVE
    assert isinstance(recipe.load_env_target("serve_wire:ScriptedEnv")[0], ScriptedEnv)
    assert len(recipe.load_env_target("serve_wire:ScriptedEnv", num_envs=2)[0]) == 2
    venv, _ = recipe.load_env_target(
        "serve_wire:ScriptedEnv", num_envs=2, vectorization_mode="sync"
    )
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    with pytest.raises(ValueError, match="is a serving option"):
        recipe.load_env_target("CartPole-v1", kwargs={"num_envs": 2})
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        recipe.load_env_target("CartPole-v1", num_envs=0)
    with pytest.raises(ValueError, match="vectorization_mode must be"):
        recipe.load_env_target("CartPole-v1", num_envs=2, vectorization_mode="threads")
    with pytest.raises(ValueError, match="applies to several lanes"):
        recipe.load_env_target("CartPole-v1", autoreset="same-step")
    with pytest.raises(ValueError, match="is a live env"):
        recipe.load_env_target(f"{__name__}:LIVE", num_envs=2)
    with pytest.raises(TypeError, match="is a int, not an env"):
        recipe.load_env_target(f"{__name__}:NOT_AN_ENV")


def test_targets_resolve_to_objects_or_stay_gymnasium_ids() -> None:
    assert recipe.resolve_target("CartPole-v1") is None
    assert recipe.resolve_target("no_such_module_here:Env") is None
    assert recipe.resolve_target("serve_wire:NoSuchAttr") is None
    assert recipe.resolve_target("serve_wire:ScriptedEnv") is ScriptedEnv
    assert _serving.is_model_target(f"{__name__}:ZERO", []) and _serving.is_model_target(
        f"{__name__}:Zero", []
    )
    assert not _serving.is_model_target("serve_wire:ScriptedEnv", [])
    assert not _serving.is_model_target("x:y", ["no_such_package_here"])
    env = ScriptedEnv()
    env.close_error = RuntimeError("ignored")
    recipe.close_quietly([env, ScriptedEnv()])
    assert env.closed == 1
