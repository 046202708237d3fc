"""Split stepping (``step_async`` / ``step_wait``) on every client flavour (issue 26, item 1)."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp
from conftest import require
from rlmesh.errors import (
    AlreadyPendingCallError,
    AsyncCallError,
    ConnectionLost,
    NoAsyncCallError,
    RequestTimeout,
    SessionClosed,
)
from rlmesh.transport import shm
from rlmesh.transport.connection import busy_poll_default

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

FLAVOURS = ["rlmesh", "numpy", "torch", "jax", "gymnasium"]


class SlowEnv(gym.Env):  # type: ignore[type-arg]
    """Obs ``[t]`` (steps since reset); ``step(1)`` takes ``delay`` seconds."""

    def __init__(self, delay: float = 0.6) -> None:
        self.delay = delay
        self.observation_space = gym.spaces.Box(0, 10_000, (1,), np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0], dtype=np.int64), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if int(action) == 1:
            threading.Event().wait(self.delay)
        self.t += 1
        return np.array([self.t], dtype=np.int64), 1.0, False, False, {}


def client(flavour: str, address: str, *, vector: bool, **kwargs: Any) -> Any:
    if flavour == "rlmesh":
        mod: Any = rlmesh
    elif flavour == "numpy":
        mod = rnp
    elif flavour == "gymnasium":
        mod = rg
    else:
        require(flavour)
        import importlib

        mod = importlib.import_module(f"rlmesh.{flavour}")
    return (mod.RemoteVectorEnv if vector else mod.RemoteEnv)(address, **kwargs)


def host(x: Any) -> np.ndarray[Any, Any]:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def actions(vector: bool, value: int, n: int = 3) -> Any:
    return np.full(n, value, dtype=np.int64) if vector else value


def served(serve: Any, vector: bool, **kw: Any) -> Any:
    return serve([SlowEnv(**kw) for _ in range(3)] if vector else SlowEnv(**kw))


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_step_async_then_step_wait_returns_what_step_returns(serve, flavour, vector):
    a = client(
        flavour,
        serve(gym.make_vec("CartPole-v1", 3) if vector else gym.make("CartPole-v1")).address,
        vector=vector,
    )
    b = client(
        flavour,
        serve(gym.make_vec("CartPole-v1", 3) if vector else gym.make("CartPole-v1")).address,
        vector=vector,
    )
    oa, _ = a.reset(seed=5)
    ob, _ = b.reset(seed=5)
    for i in range(30):
        act = actions(vector, i % 2)
        a.step_async(act)
        got = a.step_wait()
        want = b.step(act)
        for x, y in zip(got[:4], want[:4]):
            assert np.array_equal(host(x), host(y))
    a.close()
    b.close()


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_out_of_order_split_calls_raise_typed_errors_and_the_step_survives(serve, flavour, vector):
    env = client(flavour, served(serve, vector).address, vector=vector)
    env.reset(seed=0)
    with pytest.raises(NoAsyncCallError, match="step_async"):
        env.step_wait()
    env.step_async(actions(vector, 0))
    with pytest.raises(AlreadyPendingCallError) as second:
        env.step_async(actions(vector, 0))
    assert isinstance(second.value, RuntimeError) and isinstance(second.value, AsyncCallError)
    with pytest.raises(AlreadyPendingCallError, match="step_wait"):
        env.step(actions(vector, 0))
    with pytest.raises(AlreadyPendingCallError, match="reset"):
        env.reset()
    obs = env.step_wait()[0]  # the one step that was sent
    assert host(obs).reshape(-1).tolist() == [1] * (3 if vector else 1)
    with pytest.raises(NoAsyncCallError):
        env.step_wait()
    env.close()


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_step_wait_timeout_is_a_RequestTimeout_and_the_session_stays_usable(
    serve, flavour, vector
):
    env = client(
        flavour,
        served(serve, vector, delay=0.6).address,
        vector=vector,
        request_timeout_seconds=0.15,
    )
    env.reset(seed=0)
    env.step_async(actions(vector, 1))  # the env takes 0.6 s per lane
    with pytest.raises(RequestTimeout) as caught:
        env.step_wait()
    assert isinstance(caught.value, TimeoutError)
    with pytest.raises(NoAsyncCallError):  # the timed-out step is no longer pending here
        env.step_wait()
    threading.Event().wait(0.6 * (3 if vector else 1) + 0.3)  # let the late reply arrive
    env.step_async(actions(vector, 0))
    obs = env.step_wait()[0]
    assert host(obs).reshape(-1).tolist() == [2] * (
        3 if vector else 1
    )  # the late step ran; its reply was dropped
    env.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_server_killed_during_step_wait_raises_ConnectionLost_as_step_does(
    serve_process, flavour
):
    proc, address = serve_process("integration_envs:make_sleepy")
    env = client(flavour, address, vector=False)
    env.reset(seed=0)
    env.step_async(1)  # the env hangs in this step
    proc.kill()
    proc.wait(timeout=30)
    with pytest.raises(ConnectionLost):
        env.step_wait()
    with pytest.raises(SessionClosed):
        env.step_async(0)
    env.close()


@pytest.mark.skipif(
    not shm.shm_supported() or not busy_poll_default(),
    reason="shared-memory rings need x86-64 Linux and busy polling (two or more CPUs)",
)
@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
def test_split_stepping_works_through_shared_memory_rings(serve_process, vector):
    _proc, address = serve_process("CartPole-v1", *(["--num-envs", "3"] if vector else []))
    local = (
        gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
        if vector
        else gym.make("CartPole-v1")
    )
    with client("numpy", address, vector=vector) as env:
        obs, _ = env.reset(seed=2)
        lobs, _ = local.reset(seed=2)
        for i in range(60):
            act = actions(vector, i % 2)
            env.step_async(act)
            obs, rew, term, trunc, _ = env.step_wait()
            lobs, lrew, lterm, ltrunc, _ = local.step(act)
            assert np.array_equal(obs, lobs) and np.array_equal(rew, lrew)
            if not vector and (term or trunc):
                obs, _ = env.reset(seed=i)
                lobs, _ = local.reset(seed=i)
        assert env._session.conn.shm is not None  # the steps above went through the rings
