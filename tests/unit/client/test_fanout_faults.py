"""A fan-out round under faults: one deadline, timeouts that name their endpoints, garbage as a loss.

Four in-memory endpoints, some of them silent or sending garbage. The clock is a fake one
that the in-memory sockets advance by exactly their timeout when a read finds nothing, as
the kernel would make the caller wait: "how long did the round take" is then a count the
test can assert on, not a wall-clock measurement.

- One deadline per round: with 3 of 4 endpoints hung, ``step_wait``/``reset`` end within
  one ``request_timeout_seconds`` (not one per hung endpoint) and ``close`` within one close
  timeout, on every flavour, ``rlmesh.sb3.RemoteVecEnv`` included.
- The timeout names every endpoint that missed the deadline (``EndpointTimeout``: message,
  ``indices``/``addresses``/``lanes``), is raised after the other replies were read, and
  leaves those sessions usable.
- A reply that does not decode (garbage, an oversized frame) is an ``EndpointLost`` for
  that endpoint at once, its ``ProtocolException`` as the cause, so ``reconnect(i)`` works
  on the first fault.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.numpy as rnp
from conftest import require
from rlmesh.client import _fanout, _session
from rlmesh.errors import EndpointLost, EndpointTimeout, ProtocolException, RequestTimeout
from rlmesh.transport import stream
from rlmesh.wire import frames, messages as m

from ._memory import MemorySocket, Network, raw, silence

A, B, C, D = "tcp://a.test:1", "tcp://b.test:1", "tcp://c.test:1", "tcp://d.test:1"
TIMEOUT = 2.0


class FakeClock:
    """``time`` for the client modules; a timed-out in-memory read moves it by its timeout."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, net: Network) -> Iterator[FakeClock]:
    fake = FakeClock()
    clock_module = types.SimpleNamespace(
        monotonic=fake.monotonic, perf_counter=fake.monotonic, sleep=fake.sleep, time=fake.monotonic
    )
    for module in (_fanout, _session, stream):
        monkeypatch.setattr(module, "time", clock_module, raising=False)
    recv_into = MemorySocket.recv_into

    def waiting_recv_into(self: MemorySocket, *args: Any, **kwargs: Any) -> int:
        try:
            return recv_into(self, *args, **kwargs)
        except TimeoutError:
            assert self._timeout is not None
            fake.now += self._timeout  # the kernel made the caller wait this long
            fake.waits.append(self._timeout)
            raise

    monkeypatch.setattr(MemorySocket, "recv_into", waiting_recv_into)
    yield fake


def four(net: Network) -> list[Any]:
    return [net.serve_env(gym.make("CartPole-v1"), a) for a in (A, B, C, D)]


def reference_obs(seed: int, actions: list[int]) -> np.ndarray[Any, Any]:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    for a in actions:
        obs = env.step(a)[0]
    return np.asarray(obs)


def flavour_env(flavour: str, addresses: list[str], **kwargs: Any) -> Any:
    if flavour == "numpy":
        return rnp.RemoteVectorEnv(addresses, **kwargs)
    if flavour == "plain":
        return rlmesh.RemoteVectorEnv(addresses, **kwargs)
    import rlmesh.gymnasium as rgym

    return rgym.RemoteVectorEnv(addresses, **kwargs)


def host(value: Any) -> np.ndarray[Any, Any]:
    return np.asarray(value)


# -- one deadline per round ----------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["numpy", "plain", "gymnasium"])
def test_a_step_with_three_hung_endpoints_ends_within_one_request_timeout(
    net: Network, clock: FakeClock, flavour: str
) -> None:
    a, b, c, d = four(net)
    env = flavour_env(flavour, [A, B, C, D], request_timeout_seconds=TIMEOUT)
    env.reset(seed=0)
    for endpoint in (b, c, d):
        endpoint.then(silence(late=True))
    start = clock.now
    env.step_async(np.array([1, 1, 1, 1]))
    with pytest.raises(EndpointTimeout) as caught:
        env.step_wait()
    # the hung endpoints waited one request timeout together, not one each (6 s before)
    assert clock.now - start <= TIMEOUT + 0.01, clock.waits
    err = caught.value
    assert isinstance(err, RequestTimeout) and isinstance(err, TimeoutError)
    assert err.indices == (1, 2, 3) and err.lanes == (1, 2, 3)
    assert err.addresses == (B, C, D) and (err.index, err.address) == (1, B)
    assert err.timeout_seconds == TIMEOUT
    for i, address in ((1, B), (2, C), (3, D)):
        assert f"endpoint {i} ('{address}', lanes {i}..{i})" in str(err)
    assert "did not answer step within 2.000s" in str(err)
    # every session stays usable: the late replies are dropped, the next step is answered
    obs, *_ = env.step(np.array([0, 0, 0, 0]))
    got = host(obs)
    np.testing.assert_array_equal(got[0], reference_obs(0, [1, 0]))  # A took both steps
    np.testing.assert_array_equal(got[1], reference_obs(1, [1, 0]))  # B too (late, then on time)
    env.close()


def test_a_reset_with_three_hung_endpoints_ends_within_one_request_timeout(
    net: Network, clock: FakeClock
) -> None:
    a, b, c, d = four(net)
    env = rnp.RemoteVectorEnv([A, B, C, D], request_timeout_seconds=TIMEOUT)
    for endpoint in (a, c, d):
        endpoint.on(m.Reset, silence(late=True))
    start = clock.now
    with pytest.raises(EndpointTimeout, match=r"did not answer reset within 2.000s") as caught:
        env.reset(seed=0)
    assert clock.now - start <= TIMEOUT + 0.01, clock.waits
    assert caught.value.indices == (0, 2, 3)
    obs, _ = env.reset(seed=5)
    np.testing.assert_array_equal(obs[2], reference_obs(7, []))
    env.close()


def test_close_with_three_hung_endpoints_ends_within_one_close_timeout(
    net: Network, clock: FakeClock
) -> None:
    a, b, c, d = four(net)
    env = rnp.RemoteVectorEnv([A, B, C, D], request_timeout_seconds=TIMEOUT)
    env.reset(seed=0)
    for endpoint in (b, c, d):
        endpoint.on(m.Close, silence())
    start = clock.now
    env.close()
    assert clock.now - start <= TIMEOUT + 0.01, clock.waits
    assert env.closed
    assert a.active is None  # the endpoint that answered was closed properly
    assert all(s.closed for s in (p.client._session for p in env._fan.parts))


def test_sb3_step_wait_with_three_hung_endpoints_ends_within_one_request_timeout(
    net: Network, clock: FakeClock
) -> None:
    require("stable_baselines3")
    from rlmesh.sb3 import RemoteVecEnv

    a, b, c, d = four(net)
    env = RemoteVecEnv([A, B, C, D], request_timeout_seconds=TIMEOUT)
    env.reset()
    for endpoint in (a, b, c):
        endpoint.then(silence(late=True))
    start = clock.now
    env.step_async(np.array([1, 1, 1, 1]))
    with pytest.raises(EndpointTimeout) as caught:
        env.step_wait()
    assert clock.now - start <= TIMEOUT + 0.01, clock.waits
    assert caught.value.indices == (0, 1, 2)
    env.step_async(np.array([0, 0, 0, 0]))
    obs, *_ = env.step_wait()
    assert obs.shape == (4, 4)
    start = clock.now
    for endpoint in (a, b, c):
        endpoint.on(m.Close, silence())
    env.close()
    assert clock.now - start <= TIMEOUT + 0.01, clock.waits


# -- a corrupted reply is a lost endpoint, at once -------------------------------------------------


def garbage() -> bytes:
    return b"\x00" * 64


def oversized() -> bytes:
    """A valid prefix announcing a body far beyond the client's frame limit."""
    return frames.PREFIX.pack(frames.MAGIC, frames.VERSION, m.StepReply.KIND, 2, 16, 0, 1 << 40)


@pytest.mark.parametrize("bad", [garbage, oversized], ids=["garbage", "oversized"])
def test_a_reply_that_does_not_decode_is_an_EndpointLost_at_once(net: Network, bad: Any) -> None:
    a, b, c, d = four(net)
    env = rnp.RemoteVectorEnv([A, B, C, D])
    env.reset(seed=0)
    c.then(raw(bad()))
    with pytest.raises(EndpointLost) as caught:
        env.step(np.array([1, 1, 1, 1]))
    err = caught.value
    assert (err.index, err.address, list(err.lanes)) == (2, C, [2])
    assert isinstance(err.__cause__, ProtocolException)
    assert "endpoint 2 ('tcp://c.test:1', lanes 2..2) was lost: its reply did not decode" in str(
        err
    )
    # only that endpoint is lost; the documented recovery works on the first fault
    env.reconnect(err.index)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.array([1, 1, 1, 1]))
    np.testing.assert_array_equal(obs[3], reference_obs(3, [1]))
    env.close()


def test_a_lost_endpoint_wins_over_a_timed_out_one_and_only_it_is_marked_lost(
    net: Network, clock: FakeClock
) -> None:
    a, b, c, d = four(net)
    env = rnp.RemoteVectorEnv([A, B, C, D], request_timeout_seconds=TIMEOUT)
    env.reset(seed=0)
    a.then(silence(late=True))
    d.then(raw(garbage()))
    with pytest.raises(EndpointLost) as caught:
        env.step(np.array([1, 1, 1, 1]))
    assert caught.value.index == 3
    assert [p.broken for p in env._fan.parts] == [False, False, False, True]
    with pytest.raises(EndpointLost, match=r"endpoint 3 .* call reconnect\(3\)"):
        env.step(np.array([1, 1, 1, 1]))  # endpoint 0 only timed out: not marked lost
    env.reconnect(3)
    env.reset(seed=0)
    env.step(np.array([1, 1, 1, 1]))
    env.close()
