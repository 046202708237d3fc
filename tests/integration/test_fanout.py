"""One vector env over many endpoints: ``RemoteVectorEnv([addr, ...])`` (issue 26, item 2)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from integration_envs import CountdownEnv
from test_fanout_split import SlowEnv

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp
from conftest import child_env, require, stop_process, wait_for_ready_file
from rlmesh.errors import EndpointLost, NoAsyncCallError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

MODES = {
    AutoresetMode.NEXT_STEP: "next-step",
    AutoresetMode.SAME_STEP: "same-step",
    AutoresetMode.DISABLED: "disabled",
}


def cartpoles(
    serve: Any, counts: tuple[int, ...], mode: AutoresetMode = AutoresetMode.NEXT_STEP
) -> list[str]:
    """One endpoint per count: a scalar CartPole for 1, else a lane endpoint of that many lanes."""
    out = []
    for n in counts:
        env = (
            gym.make("CartPole-v1")
            if n == 1
            else rlmesh.serve.Lanes(
                [gym.make("CartPole-v1") for _ in range(n)], autoreset=MODES[mode]
            )
        )
        out.append(serve(env).address)
    return out


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def same_info(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert sorted(mine) == sorted(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            same_info(mine[key], value)
        elif key == "final_obs":
            assert all(same(x, y) for x, y in zip(mine[key], value))
        else:
            assert np.array_equal(mine[key], value), key


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next-step", "same-step"]
)
@pytest.mark.parametrize("flavour", ["gymnasium", "numpy"])
def test_mixed_endpoints_match_a_local_make_vec_step_for_step(serve, flavour, mode):
    addresses = cartpoles(serve, (1, 2, 3), mode)
    local = gym.make_vec(
        "CartPole-v1", num_envs=6, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )
    remote = (rg if flavour == "gymnasium" else rnp).RemoteVectorEnv(addresses)
    assert remote.num_envs == 6 and remote.addresses == [
        f"tcp://{a}" if "://" not in a else a for a in addresses
    ]
    if flavour == "gymnasium":
        assert isinstance(remote, rg.RemoteVectorEnv) and isinstance(remote, gym.vector.VectorEnv)
        assert (
            remote.observation_space == local.observation_space
            and remote.action_space == local.action_space
        )
        assert remote.metadata["autoreset_mode"] is mode
    else:
        assert isinstance(remote, rnp.RemoteVectorEnv) and remote.autoreset_mode == mode.value
    o1, i1 = remote.reset(seed=11)
    o2, i2 = local.reset(seed=11)
    assert np.array_equal(o1, o2)
    rng = np.random.default_rng(3)
    ended = 0
    for _ in range(250):
        a = rng.integers(0, 2, 6)
        o1, r1, t1, u1, i1 = remote.step(a)
        o2, r2, t2, u2, i2 = local.step(a)
        assert np.array_equal(o1, o2) and np.array_equal(r1, r2)
        assert np.array_equal(t1, t2) and np.array_equal(u1, u2)
        if flavour == "numpy":
            assert len(i1.pop("episode_ids")) == 6
            ended += i1.pop("completed_episodes")
        same_info(i1, i2)
    if flavour == "numpy":
        assert ended >= 10  # each lane ended several episodes, each counted once
    remote.close()


def test_int_and_list_seeds_seed_the_lanes_like_make_vec(serve):
    addresses = cartpoles(serve, (2, 1, 2))
    local = gym.make_vec("CartPole-v1", num_envs=5, vectorization_mode="sync")
    with rg.RemoteVectorEnv(addresses) as remote:
        assert np.array_equal(remote.reset(seed=100)[0], local.reset(seed=100)[0])
        seeds = [7, 3, 99, 1, 42]
        assert np.array_equal(remote.reset(seed=seeds)[0], local.reset(seed=seeds)[0])


def test_every_flavour_batches_values_as_for_one_endpoint(serve):
    addresses = cartpoles(serve, (1, 2))
    with rnp.RemoteVectorEnv(addresses) as envs:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        obs, rew, term, trunc, _ = envs.step(np.zeros(3, int))
        assert rew.dtype == np.float64 and term.dtype == bool and trunc.shape == (3,)
    torch = require("torch")
    import rlmesh.torch as rt

    with rt.RemoteVectorEnv(addresses) as envs:
        obs, _ = envs.reset(seed=0)
        obs, rew, term, _, _ = envs.step(torch.zeros(3, dtype=torch.int64))
        assert isinstance(obs, torch.Tensor) and obs.shape == (3, 4) and rew.dtype == torch.float64
        assert isinstance(envs, rt.RemoteVectorEnv) and term.dtype == torch.bool
    require("jax")
    import jax.numpy as jnp

    import rlmesh.jax as rj

    with rj.RemoteVectorEnv(addresses) as envs:
        obs, _ = envs.reset(seed=0)
        obs, rew, _, _, _ = envs.step(jnp.zeros(3, dtype=jnp.int32))
        assert obs.shape == (3, 4) and type(obs).__module__.startswith("jax")
    with rlmesh.RemoteVectorEnv(addresses) as envs:  # the dependency-free flavour too
        obs, _ = envs.reset(seed=0)
        envs.step_async(np.zeros(3, int))
        obs, *_ = envs.step_wait()
        assert list(obs.shape) == [3, 4]


def test_info_is_merged_with_gymnasiums_key_masks(serve):
    addresses = [serve(CountdownEnv(2)).address, serve([CountdownEnv(3), CountdownEnv(3)]).address]
    local = gym.vector.SyncVectorEnv(
        [lambda: CountdownEnv(2), lambda: CountdownEnv(3), lambda: CountdownEnv(3)]
    )
    with rg.RemoteVectorEnv(addresses) as remote:
        r, lr = remote.reset(seed=4), local.reset(seed=4)
        same_info(r[1], lr[1])
        assert r[1]["seed"].tolist() == [4, 5, 6] and r[1]["_seed"].all()
        for _ in range(7):
            r = remote.step(np.ones(3, int))
            lr = local.step(np.ones(3, int))
            assert np.array_equal(r[0], lr[0])
            same_info(r[4], lr[4])


@pytest.mark.parametrize(
    "mode", [AutoresetMode.DISABLED, AutoresetMode.SAME_STEP], ids=["disabled", "same-step"]
)
def test_a_partial_reset_goes_to_the_endpoints_owning_those_lanes(serve, mode):
    addresses = cartpoles(serve, (1, 3, 2), mode)
    local = gym.make_vec(
        "CartPole-v1", num_envs=6, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )
    with rg.RemoteVectorEnv(addresses) as remote:
        remote.reset(seed=1)
        local.reset(seed=1)
        for _ in range(3):
            before, *_ = remote.step(np.ones(6, int))
            local.step(np.ones(6, int))
        mask = np.array(
            [True, False, True, False, True, True]
        )  # the scalar, one lane of the 3, the whole 2-lane
        obs, info = remote.reset(seed=50, options={"reset_mask": mask})
        lobs, linfo = local.reset(seed=50, options={"reset_mask": mask})
        assert np.array_equal(obs, lobs)
        assert np.array_equal(obs[~mask], before[~mask])  # the other lanes kept their latest obs
        o1, *_ = remote.step(np.zeros(6, int))
        o2, *_ = local.step(np.zeros(6, int))
        assert np.array_equal(o1, o2)
    with rnp.RemoteVectorEnv(addresses) as remote:  # the numpy flavour's env_indices
        remote.reset(seed=1)
        local.reset(seed=1)
        obs, info = remote.reset(seed=[8, 9], env_indices=[0, 2])
        lobs, _ = local.reset(
            seed=[8, None, 9, None, None, None],
            options={"reset_mask": mask & np.array([1, 0, 1, 0, 0, 0], dtype=bool)},
        )
        assert np.array_equal(obs, lobs) and len(info["episode_ids"]) == 6


def test_endpoints_that_disagree_are_refused_naming_the_odd_one(serve):
    good = cartpoles(serve, (2,))[0]
    other = serve(gym.make("MountainCar-v0")).address
    with pytest.raises(ValueError, match=r"endpoint 1 .*observation space") as caught:
        rg.RemoteVectorEnv([good, other])
    assert other.split(":")[-1] in str(caught.value)
    same_step = cartpoles(serve, (2,), AutoresetMode.SAME_STEP)[0]
    with pytest.raises(ValueError, match=r"endpoint 2 .*autoresets 'SameStep'"):
        rnp.RemoteVectorEnv([cartpoles(serve, (1,))[0], good, same_step])
    with pytest.raises(ValueError, match="autoresets 'NextStep'"):
        rnp.RemoteVectorEnv([good], autoreset_mode="same-step")
    assert rnp.RemoteVectorEnv([good, cartpoles(serve, (1,))[0]]).num_envs == 3  # slots were freed


def _spawn_at(address: str, ready_dir: Any, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    ready = ready_dir / "again.ready"
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        "CartPole-v1",
        "--address",
        address,
        "--ready-file",
        str(ready),
        *args,
    ]
    proc = subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return proc, wait_for_ready_file(proc, ready, 60)


def test_an_endpoint_killed_mid_run_is_named_and_can_be_reconnected(serve_process, short_tmp):
    procs = [serve_process("CartPole-v1", *args) for args in ((), ("--num-envs", "2"), ())]
    addresses = [address for _, address in procs]
    envs = rg.RemoteVectorEnv(addresses)
    envs.reset(seed=0)
    for _ in range(5):
        envs.step(np.zeros(4, int))
    victim = procs[1][0]
    victim.kill()  # by PID: the 2-lane endpoint, lanes 1..2
    victim.wait(timeout=30)
    with pytest.raises(EndpointLost) as caught:
        for _ in range(3):  # the kernel may take one more request before the EOF shows
            envs.step(np.zeros(4, int))
    err = caught.value
    assert isinstance(err, ConnectionError) and err.index == 1 and err.lanes == range(1, 3)
    assert addresses[1].split(":")[-1] in str(err) and "reconnect(1)" in str(err)
    with pytest.raises(EndpointLost, match="reconnect"):  # until it is reconnected
        envs.step(np.zeros(4, int))
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    # the same address serves again: reconnect that endpoint, reset, carry on
    proc, _ = _spawn_at(addresses[1], short_tmp, "--num-envs", "2")
    try:
        proc_restart_address = addresses[1]
        envs.reconnect(1)
        obs, _ = envs.reset(seed=3)
        local = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        assert np.array_equal(obs, local.reset(seed=3)[0])
        for _ in range(20):
            o1, *_ = envs.step(np.ones(4, int))
            o2, *_ = local.step(np.ones(4, int))
            assert np.array_equal(o1, o2)
        envs.close()
        assert proc_restart_address in envs.address
    finally:
        stop_process(proc)


def test_after_a_lost_endpoint_close_closes_every_endpoint(serve_process, serve):
    proc, address = serve_process("CartPole-v1")
    other = cartpoles(serve, (2,))[0]
    envs = rnp.RemoteVectorEnv([other, address])
    envs.reset(seed=0)
    proc.kill()
    proc.wait(timeout=30)
    with pytest.raises(EndpointLost) as caught:
        for _ in range(3):
            envs.step(np.zeros(3, int))
    assert caught.value.index == 1 and caught.value.lanes == range(2, 3)
    envs.close()
    assert envs.closed
    with pytest.raises(
        rlmesh.errors.SessionClosed, match="closed"
    ):  # you closed it: not EndpointLost
        envs.step(np.zeros(3, int))
    with rnp.RemoteVectorEnv(other) as again:  # the healthy endpoint's session was released
        again.reset(seed=0)


def finished_steps(envs: list[SlowEnv], t: int, within: float = 60.0) -> None:
    """Wait until each served env has finished its step ``t`` (the server's thread runs it),
    rather than sleeping for as long as the step should take."""
    deadline = time.monotonic() + within
    while any(env.t < t for env in envs) and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    assert [env.t for env in envs] == [t] * len(envs)


def test_a_timeout_on_one_endpoint_is_raised_after_the_others_replied_and_all_stay_usable(serve):
    last = SlowEnv(0.6)
    addresses = [
        serve(SlowEnv(0.6)).address,
        serve([SlowEnv(0.6), SlowEnv(0.6)]).address,
        serve(last).address,
    ]
    envs = rnp.RemoteVectorEnv(addresses, request_timeout_seconds=0.3)
    envs.reset(seed=0)
    with pytest.raises(rlmesh.errors.RequestTimeout):
        envs.step(np.array([0, 0, 0, 1]))  # only the last endpoint is slow
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    finished_steps([last], 1)  # the slow endpoint finished its step (its reply is stale)
    obs, *_ = envs.step(np.zeros(4, int))
    assert obs.reshape(-1).tolist() == [2, 2, 2, 2]  # every endpoint ran both steps
    envs.close()


def test_three_hung_endpoints_of_four_share_one_deadline_and_are_all_named(serve, monkeypatch):
    # 3 of 4 endpoints hang for longer than the request timeout: the round waits for them
    # together (the wait each one gets is what is left of one deadline), the timeout names
    # all three, and every session is usable again once they answered
    from rlmesh.client._session import ClientSession

    waits: list[float] = []
    receive = ClientSession.receive

    def spy(self: Any, *, timeout: Any = None) -> Any:
        waits.append(timeout)
        return receive(self, timeout=timeout)

    slow = [SlowEnv(1.2) for _ in range(4)]
    addresses = [serve(env).address for env in slow]
    envs = rnp.RemoteVectorEnv(addresses, request_timeout_seconds=0.4)
    envs.reset(seed=0)
    monkeypatch.setattr(ClientSession, "receive", spy)
    with pytest.raises(rlmesh.errors.EndpointTimeout) as caught:
        envs.step(np.array([0, 1, 1, 1]))
    monkeypatch.setattr(ClientSession, "receive", receive)
    assert caught.value.indices == (1, 2, 3) and caught.value.lanes == (1, 2, 3)
    assert list(caught.value.addresses) == addresses[1:]
    assert all(a in str(caught.value) for a in addresses[1:])
    # one deadline: the waits granted add up to one request timeout, not three (1.2 s before)
    assert len(waits) == 4 and sum(waits[1:]) <= 0.4 * 1.5, waits
    finished_steps(slow[1:], 1)  # the hung endpoints finished their step
    obs, *_ = envs.step(np.zeros(4, int))
    assert obs.reshape(-1).tolist() == [2, 2, 2, 2]  # every endpoint ran both steps
    envs.close()


class _Recording(SlowEnv):
    """SlowEnv that logs when each step starts and ends (shared log, per-env name)."""

    def __init__(self, name: str, log: list[tuple[str, str]], delay: float) -> None:
        super().__init__(delay)
        self.name, self.log = name, log

    def step(self, action: Any) -> Any:
        self.log.append((self.name, "start"))
        out = super().step(action)
        self.log.append((self.name, "end"))
        return out


def test_one_slow_endpoint_does_not_hold_back_the_others_requests(serve):
    log: list[tuple[str, str]] = []
    slow = serve(_Recording("slow", log, 0.5)).address
    fast = serve(_Recording("fast", log, 0.0)).address
    with rnp.RemoteVectorEnv([slow, fast]) as envs:
        envs.reset(seed=0)
        envs.step(np.array([1, 0]))  # only the first endpoint is slow
    # the fast endpoint got its request (and answered) while the slow one was still stepping
    assert log.index(("fast", "end")) < log.index(("slow", "end"))


def test_a_fan_out_client_waits_for_replies_without_spinning(serve, monkeypatch):
    # Busy polling on one endpoint's reply would take a core the other endpoints' servers
    # need; a single-endpoint client keeps its polling.
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "1000")
    monkeypatch.setattr("rlmesh.transport.busypoll._usable_cpus", lambda: 8)
    servers = [
        serve(gym.make("CartPole-v1")),
        serve(rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)])),
    ]
    addresses = [s.address for s in servers]
    with rnp.RemoteVectorEnv(addresses) as envs:
        assert [part.client._session.conn.busy_poll for part in envs._fan.parts] == [0.0, 0.0]
        # each server was told (Hello capability rlmesh.client.fan_out.v1) and does not spin either
        assert [s._life.loop.fan_out_peer for s in servers] == [True, True]
        envs.reset(seed=0)
        envs.reconnect(0)
        assert envs._fan.parts[0].client._session.conn.busy_poll == 0.0
    lone = serve(gym.make("CartPole-v1"))
    with rnp.RemoteEnv(lone.address) as one:
        assert one._session.conn.busy_poll > 0
        one.reset(seed=0)
        assert lone._life.loop.fan_out_peer is False
