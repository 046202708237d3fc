"""Client timeouts (CLT-5, SES-3, SES-4): deterministic, against envs and listeners that never answer.

No test measures speed: a step "that never returns in time" blocks on an event the
test releases only after the client has already given up, and a listener "that never
answers" accepts and stays silent (STYLE "Deterministic time").
"""

from __future__ import annotations

import socket
import threading

import pytest
from integration_envs import BlockingEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import RequestTimeout

pytestmark = pytest.mark.timeout(60)


def test_a_request_timeout_raises_TimeoutError_without_waiting_for_the_step(serve):
    env = BlockingEnv()
    server = serve(env)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=0.2) as client:
        client.reset()
        with pytest.raises(
            TimeoutError, match=r"remote environment call timed out after 0\.200s"
        ) as info:
            client.step(1)
        assert isinstance(info.value, RequestTimeout)
        assert info.value.timeout_seconds == pytest.approx(0.2)
        assert not env.finished.is_set()  # the client gave up while the step still ran
        env.release.set()
        # the session survives; the late reply to the timed-out step is discarded (SES-3)
        obs, reward, *_ = client.step(0)
        assert obs.tolist() == [2]  # step #2's own reply, not the stale step #1
        obs, *_ = client.step(0)
        assert obs.tolist() == [3]
        obs, _ = client.reset()
        assert obs.tolist() == [0]


def test_a_timed_out_reset_leaves_the_client_usable(serve):
    class BlockingReset(BlockingEnv):
        def reset(self, **kwargs):  # type: ignore[no-untyped-def]
            if not self.release.is_set():
                self.entered.set()
                self.release.wait(30)
            return super().reset(**kwargs)

    env = BlockingReset()
    server = serve(env)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=0.2) as client:
        with pytest.raises(TimeoutError):
            client.reset()
        assert env.entered.is_set()
        env.release.set()
        obs, info = client.reset()
        assert obs.tolist() == [0] and len(info["episode_ids"]) == 1


def test_request_timeout_0_or_None_waits_for_a_slow_step(serve):
    env = BlockingEnv()
    server = serve(env)
    for timeout in (None, 0):
        env.release.clear()
        with rnp.RemoteEnv(server.address, request_timeout_seconds=timeout) as client:
            client.reset()
            threading.Timer(0.3, env.release.set).start()
            obs, *_ = client.step(1)
            assert obs.tolist() == [1]


@pytest.fixture
def silent_listener():
    """A TCP listener that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_forever() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    listener.close()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("cls", [rlmesh.RemoteEnv, rnp.RemoteEnv, rnp.RemoteVectorEnv])
def test_connect_timeout_against_a_listener_that_never_answers_raises_TimeoutError(
    silent_listener, cls
):
    with pytest.raises(
        TimeoutError, match=r"remote environment connect timed out after 0\.300s"
    ) as info:
        cls(silent_listener, connect_timeout_seconds=0.3)
    assert isinstance(info.value, RequestTimeout)
    assert info.value.timeout_seconds == pytest.approx(0.3)


@pytest.mark.parametrize("name", ["connect_timeout_seconds", "request_timeout_seconds"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), float("-inf")])
def test_bad_timeout_values_are_a_ValueError_before_dialing(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a non-negative finite float or None"):
        rnp.RemoteEnv("127.0.0.1:1", **{name: value})


def test_a_non_number_timeout_is_refused():
    with pytest.raises(TypeError, match="request_timeout_seconds"):
        rnp.RemoteEnv("127.0.0.1:1", request_timeout_seconds="1")  # type: ignore[arg-type]


def test_an_unreachable_address_fails_in_the_constructor_with_the_hint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        ConnectionError,
        match=r"could not connect to an env at 'tcp://127\.0\.0\.1:\d+'; is the EnvServer running\?",
    ):
        rnp.RemoteEnv(f"127.0.0.1:{port}", connect_timeout_seconds=2)


def test_a_request_timeout_on_a_vector_client_leaves_it_usable(serve):
    lanes = [BlockingEnv(), BlockingEnv()]
    server = serve(lanes)
    with rnp.RemoteVectorEnv(server.address, request_timeout_seconds=0.2) as envs:
        envs.reset()
        with pytest.raises(TimeoutError):
            envs.step([1, 0])
        lanes[0].release.set()
        obs, *_ = envs.step([0, 0])
        assert obs.reshape(-1).tolist() == [2, 2]


def test_close_after_a_timeout_returns_promptly_even_with_the_env_still_busy(serve):
    env = BlockingEnv()
    server = serve(env)
    client = rnp.RemoteEnv(server.address, request_timeout_seconds=0.2)
    client.reset()
    with pytest.raises(TimeoutError):
        client.step(1)
    client.close()  # CLT-10: a graceful close bounded by the timeout, then a local detach
    assert client.closed
    env.release.set()
    with rnp.RemoteEnv(server.address) as again:
        assert again.reset()[0].tolist() == [0]
