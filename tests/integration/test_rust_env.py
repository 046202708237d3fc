"""The Rust crate (``rust/``, issue 17) against the Python side, over real sockets.

The examples are built once per test session (``cargo build --release --examples
--offline``; cargo skips the work when nothing changed). Rust-served envs are driven
by ``rlmesh.run``, ``rlmesh.numpy.RemoteEnv`` and (when that flavour exists)
``rlmesh.gymnasium.RemoteEnv``; the Rust ``RemoteEnv`` drives a Python-served env.
Requirement ids: RENV-1..RENV-6 (spec serving.md §6), AR-1..AR-9, RND-3, SES-5.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require, require_tool
from rlmesh.errors import EnvironmentException, SessionClosed
from rlmesh.models import NumpyModel

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::rlmesh.WorkflowEditionWarning")]

ROOT = Path(__file__).resolve().parents[2]
RUST = ROOT / "rust"
EXAMPLES = RUST / "target" / "release" / "examples"
SEEDS = [1, 2, 3]


def balance(obs: Any) -> int:
    """A deterministic CartPole policy: push toward the pole's lean (the Rust drive example's too)."""
    return int(np.asarray(obs)[2] > 0)


@pytest.fixture(scope="session")
def rust_examples() -> Path:
    """Build the examples once per session (a no-op for cargo when they are current)."""
    cargo = require_tool("cargo", "the Rust crate in rust/ is built with cargo")
    proc = subprocess.run(
        [cargo, "build", "--release", "--offline", "--examples"],
        cwd=RUST,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"cargo build failed:\n{proc.stderr[-4000:]}"
    return EXAMPLES


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        raise AssertionError(
            "the Rust example printed no address within its start-up window"
        ) from None


@pytest.fixture
def rust_server(rust_examples: Path, short_tmp: Path) -> Iterator[Callable[..., str]]:
    """``rust_server(example, transport="tcp", *args) -> address``; every process is stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(
        example: str, transport: str = "tcp", *args: str, env: dict[str, str] | None = None
    ) -> str:
        address = (
            f"unix://{short_tmp}/{example}{len(procs)}.sock"
            if transport == "unix"
            else "127.0.0.1:0"
        )
        proc = subprocess.Popen(
            [str(rust_examples / example), address, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        procs.append(proc)
        bound = _first_line(proc, timeout=30)
        assert bound.startswith("unix://" if transport == "unix" else "tcp://127.0.0.1:"), bound
        assert not bound.endswith(":0")
        return bound

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _gym() -> Any:
    return require("gymnasium")


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_rlmesh_run_plays_episodes_on_the_rust_cartpole(
    rust_server: Callable[..., str], transport: str
) -> None:
    """RENV-1/RENV-3: the Rust CartPole is a CartPole-v1 endpoint Python drives unchanged."""
    address = rust_server("cartpole", transport)
    result = rlmesh.run(NumpyModel(balance), address, seeds=SEEDS)
    assert [e.seed for e in result.episodes] == SEEDS
    for e in result.episodes:
        assert e.terminated and not e.truncated
        assert 8 <= e.steps < 500
        assert e.reward == e.steps  # one point per step, the terminal one included
    again = rlmesh.run(NumpyModel(balance), address, seeds=SEEDS)  # seeded: reproducible
    assert [(e.steps, e.reward) for e in again.episodes] == [
        (e.steps, e.reward) for e in result.episodes
    ]


def test_the_rust_cartpole_publishes_gymnasiums_contract(rust_server: Callable[..., str]) -> None:
    gym = _gym()
    from rlmesh.spaces._gym import as_spec

    with rlmesh.numpy.RemoteEnv(rust_server("cartpole")) as env:
        contract = env.env_contract
        assert contract.id == "CartPole-v1"
        assert contract.autoreset_mode == "Disabled"
        reference = gym.make("CartPole-v1")
        assert contract.observation_space == as_spec(
            reference.observation_space, "observation_space"
        )
        assert contract.action_space == as_spec(reference.action_space, "action_space")
        # issue 29 item 13: the time limit as a Python-served gym.make("CartPole-v1") publishes it
        assert dict(contract.metadata or {}) == {
            "render_modes": ["rgb_array"],
            "render_fps": 50,
            "max_episode_steps": 500,
        }
        assert contract.render_mode is None
        assert env.render() is None  # served without a render mode (RND-2)


def test_the_rust_cartpole_follows_gymnasiums_dynamics(rust_server: Callable[..., str]) -> None:
    """Same dynamics and seeding as Gymnasium's: a seed gives the same start, the same actions the same states."""
    gym = _gym()
    reference = gym.make("CartPole-v1")
    with rlmesh.numpy.RemoteEnv(rust_server("cartpole")) as env:
        for seed in (0, 5, 2**40 + 3):
            obs, info = env.reset(seed=seed)
            ref_obs, _ = reference.reset(seed=seed)
            assert obs.dtype == np.float32 and obs.shape == (4,)
            np.testing.assert_array_equal(obs, ref_obs)
            assert len(info["episode_ids"]) == 1
            for t in range(500):
                action = balance(obs) if t % 7 else 1 - balance(obs)
                obs, reward, terminated, truncated, _ = env.step(action)
                ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(action)
                np.testing.assert_array_equal(obs, ref_obs)
                assert (reward, terminated, truncated) == (
                    ref_reward,
                    ref_terminated,
                    ref_truncated,
                )
                if terminated or truncated:
                    break
            assert terminated
        with pytest.raises(EnvironmentException, match="Seed must be a non-negative integer"):
            env.reset(seed=-1)


def test_rlmesh_run_on_the_rust_cartpole_matches_a_local_gymnasium_run(
    rust_server: Callable[..., str],
) -> None:
    gym = _gym()
    seeds = list(range(8))
    remote = rlmesh.run(NumpyModel(balance), rust_server("cartpole"), seeds=seeds)
    local = rlmesh.run(NumpyModel(balance), gym.make("CartPole-v1"), seeds=seeds)
    outcome = [(e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in remote.episodes]
    assert outcome == [
        (e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in local.episodes
    ]


def test_rust_render_frames_reach_python_as_uint8_images(rust_server: Callable[..., str]) -> None:
    """RENV-4 / RND-3: CHW float frames are cast (not clamped) to uint8 and transposed to HWC."""
    with rlmesh.numpy.RemoteEnv(rust_server("faulty")) as env:
        frame = env.render()
        expected = np.arange(30, dtype=np.float32).reshape(3, 2, 5)
        expected[0, 0, 0] = 300
        assert frame.dtype == np.uint8
        np.testing.assert_array_equal(frame, expected.astype(np.uint8).transpose(1, 2, 0))
        assert frame[0, 0, 0] == 44
    with rlmesh.numpy.RemoteEnv(rust_server("cartpole", "tcp", "rgb_array")) as env:
        env.reset(seed=1)
        frame = env.render()
        assert frame.shape == (60, 120, 3) and frame.dtype == np.uint8
        assert (frame == 0).any() and (frame == 255).any()


def test_a_recoverable_rust_error_keeps_the_session(rust_server: Callable[..., str]) -> None:
    """RENV-6: Error::environment_recoverable fails one request; the session goes on."""
    with rlmesh.numpy.RemoteEnv(rust_server("faulty")) as env:
        obs, info = env.reset(seed=9, options={"level": 2})
        assert info["seed_seen"] == 9 and info["options_seen"] == {"level": 2}
        with pytest.raises(EnvironmentException) as caught:
            env.step(1)
        assert str(caught.value) == "[INTERNAL] step failed: try again"
        assert caught.value.recoverable
        obs, reward, terminated, truncated, info = env.step(0)
        np.testing.assert_array_equal(obs, [1.0, 0.0])
        assert reward == 1.0 and info["had_action"] is True
        with pytest.raises(
            EnvironmentException, match=r"^\[INTERNAL\] reset failed: reset refused by options$"
        ):
            env.reset(options={"fail": True})
        env.reset()  # still usable
        _, _, _, truncated, _ = env.step(5)
        assert truncated
        # the Rust server offers no shared-memory rings: past the third request the
        # Python client is still on the socket (it never sends Attach without the offer)
        assert env._session.conn.shm is None


def test_the_rust_client_refuses_a_vector_endpoint_clearly(
    rust_examples: Path, serve: Callable[..., Any]
) -> None:
    gym = _gym()
    server = serve([gym.make("CartPole-v1") for _ in range(2)])
    proc = subprocess.run(
        [str(rust_examples / "drive"), server.address, "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "RemoteEnv drives one env" in proc.stderr and "serves 2 lanes" in proc.stderr


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (2, r"^\[INTERNAL\] step failed: boom$"),
        (3, r"^\[INTERNAL\] step task panicked: kaboom$"),
        (
            4,
            r"^\[INTERNAL\] step failed: the env returned an observation that does not match observation_space",
        ),
    ],
)
def test_a_fatal_rust_error_ends_the_session(
    rust_server: Callable[..., str], action: int, message: str
) -> None:
    """RENV-6: any other error ends the session with ``[INTERNAL] {op} failed: {message}``."""
    address = rust_server("faulty")
    env = rlmesh.numpy.RemoteEnv(address)
    env.reset()
    with pytest.raises(EnvironmentException, match=message) as caught:
        env.step(action)
    assert not caught.value.recoverable
    with pytest.raises((SessionClosed, ConnectionError)):
        env.step(0)
    env.close()
    with rlmesh.numpy.RemoteEnv(address) as again:  # the endpoint serves the next client
        again.reset()
        assert again.step(0)[1] == 1.0


def test_episode_records_and_ids_match_python_bookkeeping(rust_server: Callable[..., str]) -> None:
    """AR-3/INFO-1/INFO-2: the client's ids travel with the episode; records count steps and reward."""
    with rlmesh.numpy.RemoteEnv(rust_server("faulty")) as env:
        _, info = env.reset(seed=4)
        ids = info["episode_ids"]
        for i in range(5):
            _, _, terminated, _, info = env.step(0)
            assert info["episode_ids"] == ids
            assert info.get("completed_episodes", 0) == (1 if i == 4 else 0)
        assert terminated


def test_a_busy_rust_endpoint_refuses_a_second_client(rust_server: Callable[..., str]) -> None:
    address = rust_server("faulty")
    with rlmesh.numpy.RemoteEnv(address), pytest.raises(ConnectionError):
        rlmesh.numpy.RemoteEnv(address)


def test_remote_shutdown_stops_a_rust_server_when_allowed(rust_examples: Path) -> None:
    proc = subprocess.Popen(
        [str(rust_examples / "cartpole"), "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLMESH_ALLOW_REMOTE_SHUTDOWN": "1"},
    )
    try:
        address = _first_line(proc, timeout=30)
        env = rlmesh.numpy.RemoteEnv(address)
        env.reset(seed=1)
        env.step(0)
        assert env.shutdown("test over") is True
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "server-side: 2 requests" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_rust_server_checks_the_token_python_clients_send(
    rust_server: Callable[..., str],
) -> None:
    from rlmesh.errors import AuthenticationFailed
    from rlmesh.serve import ping

    address = rust_server("cartpole", "tcp", env={"RLMESH_TOKEN": "rust-t0ken"})
    for token in (None, "wrong"):
        with pytest.raises(AuthenticationFailed, match="authentication failed"):
            rlmesh.numpy.RemoteEnv(address, token=token)
    stranger = ping(address)  # a stranger's probe: the state only
    assert (stranger.state, stranger.authenticated) == ("ready", False)
    assert ping(address, token="rust-t0ken").authenticated is True
    with pytest.raises(AuthenticationFailed, match="refused the probe's token"):
        ping(address, token="wrong")  # a guess is a failure like a wrong Hello
    with rlmesh.numpy.RemoteEnv(address, token="rust-t0ken") as env:
        env.reset(seed=0)
        env.step(0)


def test_the_rust_client_sends_its_token_to_a_python_server(
    rust_examples: Path, serve: Callable[..., Any]
) -> None:
    from rlmesh.serve import ServeOptions

    gym = _gym()
    server = serve(gym.make("CartPole-v1"), options=ServeOptions(token="py-t0ken"))
    refused = subprocess.run(
        [str(rust_examples / "drive"), server.address, "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "authentication failed" in refused.stderr, refused
    ok = subprocess.run(
        [str(rust_examples / "drive"), server.address, "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RLMESH_TOKEN": "py-t0ken"},
    )
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_the_rust_client_drives_a_python_served_env(
    rust_examples: Path, serve: Callable[..., Any], transport: str
) -> None:
    """The Rust RemoteEnv plays the same CartPole episodes as a local Python run."""
    gym = _gym()
    server = serve(gym.make("CartPole-v1"), transport=transport)
    proc = subprocess.run(
        [str(rust_examples / "drive"), server.address, str(len(SEEDS))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("connected ") and "id CartPole-v1 edition 2026.06" in lines[0]
    episodes = [line.split() for line in lines[1:]]
    local = rlmesh.run(NumpyModel(balance), gym.make("CartPole-v1"), seeds=SEEDS)
    got = [(int(e[3]), int(e[5]), float(e[7]), e[9] == "true") for e in episodes]
    assert got == [(e.seed, e.steps, e.reward, e.terminated) for e in local.episodes]


def test_the_gymnasium_flavour_checks_the_rust_cartpole(rust_server: Callable[..., str]) -> None:
    """``rlmesh.gymnasium.RemoteEnv`` + ``check_env`` (once that flavour exists in this tree)."""
    if importlib.util.find_spec("rlmesh.gymnasium") is None:
        pytest.skip("rlmesh.gymnasium is not part of this tree yet (built under another issue)")
    _gym()
    from gymnasium.utils.env_checker import check_env

    import rlmesh.gymnasium as rg  # type: ignore[import-not-found,unused-ignore]

    env = rg.RemoteEnv(rust_server("cartpole"))
    try:
        check_env(env, skip_render_check=True)
        assert env.spec is not None and env.spec.max_episode_steps == 500
    finally:
        env.close()


def test_the_rust_cartpole_publishes_the_render_mode_it_serves(
    rust_server: Callable[..., str],
) -> None:
    """Issue 29 item 13: ``cartpole ADDRESS rgb_array`` serves (and publishes) ``rgb_array``."""
    with rlmesh.numpy.RemoteEnv(rust_server("cartpole", "tcp", "rgb_array")) as env:
        assert env.env_contract.render_mode == "rgb_array"
        assert env.render_mode == "rgb_array"
        env.reset(seed=0)
        frame = env.render()
        assert frame is not None and frame.dtype == np.uint8 and frame.shape[-1] == 3


def test_the_rust_cartpole_refuses_a_render_mode_it_cannot_serve(rust_examples: Path) -> None:
    proc = subprocess.run(
        [str(rust_examples / "cartpole"), "127.0.0.1:0", "human"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert 'render mode "human" is not supported' in proc.stderr
