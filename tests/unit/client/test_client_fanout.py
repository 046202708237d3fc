"""``RemoteVectorEnv([addr, ...])``: one vector env over many in-memory endpoints (issue 26).

The reference is Gymnasium's own ``SyncVectorEnv`` over the same envs: the lanes, seeds,
autoresets and infos must match it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import (
    AlreadyPendingCallError,
    EndpointLost,
    EnvironmentException,
    InvalidAction,
    NoAsyncCallError,
    SessionClosed,
)
from rlmesh.serve import Lanes
from rlmesh.wire import messages as m

from ._memory import Network, error, hang_up

A, B, C = "tcp://a.test:1", "tcp://b.test:1", "tcp://c.test:1"


def cartpoles(net: Network, *addresses: str) -> list[Any]:
    return [net.serve_env(gym.make("CartPole-v1"), a) for a in addresses]


def local(n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)], autoreset_mode=mode)


def assert_same_step(got: tuple[Any, ...], want: tuple[Any, ...]) -> None:
    for g, w in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(g, w)


def test_scalar_endpoints_step_as_a_sync_vector_env_with_next_step_autoreset(net: Network) -> None:
    cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    ref = local(2)
    assert isinstance(env, rnp.RemoteVectorEnv)
    assert env.num_envs == 2 and env.autoreset_mode == "NextStep"
    assert env.addresses == [A, B] and env.endpoint_lanes == [range(0, 1), range(1, 2)]
    obs, info = env.reset(seed=3)
    np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
    assert len(info["episode_ids"]) == 2
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        actions = rng.integers(0, 2, 2)
        got = env.step(actions)
        assert_same_step(got, ref.step(actions))
        ended += got[4]["completed_episodes"]
    assert ended >= 1  # a lane ended and this client reset it, as SyncVectorEnv does
    env.close()
    assert env.closed


def test_same_step_autoreset_puts_the_ending_observation_in_final_obs(net: Network) -> None:
    cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B], autoreset_mode="same-step")
    ref = local(2, AutoresetMode.SAME_STEP)
    assert env.autoreset_mode == "SameStep" and env.metadata["autoreset_mode"] == "SameStep"
    np.testing.assert_array_equal(env.reset(seed=5)[0], ref.reset(seed=5)[0])
    rng = np.random.default_rng(2)
    seen_final = False
    for _ in range(60):
        actions = rng.integers(0, 2, 2)
        got, want = env.step(actions), ref.step(actions)
        assert_same_step(got, want)
        if "final_obs" in want[4]:
            seen_final = True
            np.testing.assert_array_equal(got[4]["_final_obs"], want[4]["_final_obs"])
            for lane in np.flatnonzero(want[4]["_final_obs"]):
                np.testing.assert_array_equal(got[4]["final_obs"][lane], want[4]["final_obs"][lane])
    assert seen_final
    env.close()


def test_a_vector_endpoint_and_a_scalar_one_make_one_batch(net: Network) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), A)
    cartpoles(net, B)
    env = rnp.RemoteVectorEnv([A, B])
    ref = local(3)
    assert env.num_envs == 3 and env.endpoint_lanes == [range(0, 2), range(2, 3)]
    np.testing.assert_array_equal(env.reset(seed=8)[0], ref.reset(seed=8)[0])
    rng = np.random.default_rng(4)
    for _ in range(40):
        actions = rng.integers(0, 2, 3)
        assert_same_step(env.step(actions), ref.step(actions))
    obs, info = env.reset(seed=[1, None, 2], env_indices=[0, 2])  # one seed per lane
    assert obs.shape == (3, 4)
    np.testing.assert_array_equal(obs[2], gym.make("CartPole-v1").reset(seed=2)[0])
    env.close()


def test_a_partial_reset_resets_only_the_lanes_asked_for_on_the_endpoint_that_owns_them(
    net: Network,
) -> None:
    cartpoles(net, A, B, C)
    env = rnp.RemoteVectorEnv([A, B, C])
    with pytest.raises(ValueError, match="needs a full reset"):
        env.reset(env_indices=[1])
    env.reset(seed=0)
    stepped, *_ = env.step(np.array([1, 0, 1]))
    obs, info = env.reset(seed=[30], env_indices=[1])
    np.testing.assert_array_equal(obs[1], gym.make("CartPole-v1").reset(seed=30)[0])
    np.testing.assert_array_equal(obs[[0, 2]], stepped[[0, 2]])
    with pytest.raises(ValueError, match=r"lane numbers in 0..2"):
        env.reset(env_indices=[3])
    with pytest.raises(ValueError, match="selects no lane"):
        env.reset(env_indices=[])
    with pytest.raises(ValueError, match="expected 3 seeds"):
        env.reset(seed=[1, 2])
    env.close()


def test_endpoints_must_serve_the_same_spaces_and_autoreset_mode(net: Network) -> None:
    cartpoles(net, A)
    net.serve_env(gym.make("MountainCar-v0"), B)
    with pytest.raises(
        ValueError, match=r"endpoint 1 \('tcp://b.test:1', lanes 1..1\) has observation space"
    ):
        rnp.RemoteVectorEnv([A, B])
    net.serve_env(Lanes([gym.make("CartPole-v1")] * 2, autoreset="disabled"), C)
    with pytest.raises(
        ValueError, match="autoresets 'Disabled' but autoreset_mode= says 'NextStep'"
    ):
        rnp.RemoteVectorEnv([C], autoreset_mode="next-step")
    with pytest.raises(ValueError, match="autoreset_mode must be next-step, same-step or disabled"):
        rnp.RemoteVectorEnv([A], autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="needs a non-empty list"):
        rnp.RemoteVectorEnv([])
    assert all(
        ep.active is None for ep in net.endpoints.values()
    )  # every dialled endpoint was closed


def test_a_lost_endpoint_is_named_and_can_be_dialled_again(net: Network) -> None:
    _, b = cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    env.reset(seed=0)
    b.then(hang_up())
    with pytest.raises(
        EndpointLost, match=r"endpoint 1 \('tcp://b.test:1', lanes 1..1\) was lost"
    ) as info:
        env.step(np.array([0, 1]))
    assert (info.value.index, list(info.value.lanes), info.value.address) == (1, [1], B)
    with pytest.raises(EndpointLost, match=r"call reconnect\(1\) then reset\(\)"):
        env.step(np.array([0, 1]))
    with pytest.raises(EndpointLost, match="before resetting it"):
        env.reset()
    env.reconnect(1)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, local(2).reset(seed=0)[0])
    env.step(np.array([0, 1]))
    env.reconnect("b.test:1")  # by address, too
    with pytest.raises(ValueError, match=r"no endpoint 'z.test:1'"):
        env.reconnect("z.test:1")
    with pytest.raises(ValueError, match="no endpoint 7"):
        env.reconnect(7)
    env.close()


def test_reconnecting_to_an_endpoint_that_changed_is_refused(net: Network) -> None:
    cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), B)
    with pytest.raises(ValueError, match="now serves 2 lanes, not 1"):
        env.reconnect(1)
    env.close()


def test_a_failing_endpoint_raises_after_the_others_replied_and_they_stay_in_step(
    net: Network,
) -> None:
    a, _ = cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    ref = local(2)
    np.testing.assert_array_equal(env.reset(seed=1)[0], ref.reset(seed=1)[0])
    a.then(error("INVALID_ACTION", "no", op="step"))
    with pytest.raises(InvalidAction):
        env.step(np.array([0, 0]))
    ref_b = gym.make("CartPole-v1")
    ref_b.reset(seed=2)
    want_b = ref_b.step(0)[0]
    got, *_ = env.step(np.array([1, 1]))
    np.testing.assert_array_equal(got[1], ref_b.step(1)[0])  # endpoint B took both steps
    assert not np.array_equal(got[1], want_b)
    env.close()


def test_the_two_halves_of_a_step_must_pair(net: Network) -> None:
    cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    env.reset(seed=0)
    with pytest.raises(NoAsyncCallError):
        env.step_wait()
    env.step_async(np.array([0, 1]))
    with pytest.raises(AlreadyPendingCallError):
        env.step_async(np.array([0, 1]))
    with pytest.raises(AlreadyPendingCallError):
        env.reset()
    with pytest.raises(AlreadyPendingCallError):
        env.reconnect(0)
    obs, *_ = env.step_wait()
    assert obs.shape == (2, 4)
    with pytest.raises(ValueError, match="expected a leading lane axis of 2"):
        env.step(np.array([0, 1, 1]))
    env.close()
    with pytest.raises(SessionClosed, match="this vector env was closed"):
        env.step(np.array([0, 1]))
    with pytest.raises(SessionClosed):
        env.reset()


def test_render_asks_the_endpoint_that_owns_the_lane(net: Network) -> None:
    class Frames(gym.Env[Any, Any]):
        metadata = {"render_modes": ["rgb_array"]}
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)
        render_mode = "rgb_array"

        def __init__(self, shade: int) -> None:
            self.shade = shade

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return 0, {}

        def step(self, action: Any) -> Any:
            return 0, 0.0, False, False, {}

        def render(self) -> Any:
            return np.full((2, 2, 3), self.shade, np.uint8)

    net.serve_env(Frames(10), A)
    net.serve_env([Frames(20), Frames(30)], B)
    env = rnp.RemoteVectorEnv([A, B])
    env.reset()
    assert [int(env.render(env_index=i)[0, 0, 0]) for i in range(3)] == [10, 20, 30]
    with pytest.raises(ValueError, match=r"env_index must be in 0..2, got 3"):
        env.render(env_index=3)
    env.close()


def test_shutdown_asks_every_endpoint(net: Network) -> None:
    a, b = cartpoles(net, A, B)
    b.shutdown_allowed = False
    env = rnp.RemoteVectorEnv([A, B])
    assert env.shutdown() is False  # B refused
    assert a.shut_down and not b.shut_down
    env.close()


def test_repr_metadata_and_dropping_the_env(net: Network) -> None:
    a, b = cartpoles(net, A, B)
    env = rlmesh.RemoteVectorEnv([A, B])
    assert repr(env) == f"RemoteVectorEnv({[A, B]!r})"
    assert env.metadata["autoreset_mode"] == "NextStep" and env.device is None
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, rlmesh.Tensor) and obs.shape == [2, 4]
    obs, rewards, *_ = env.step(np.array([0, 1]))
    assert isinstance(obs, rlmesh.Tensor)
    env.__del__()  # what garbage collection does: both sessions let go
    assert a.active is None and b.active is None


def test_a_reset_that_fails_on_one_endpoint_is_raised_after_the_others_reset(net: Network) -> None:
    a, b = cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    b.on(m.Reset, error("INTERNAL", "reset broke", op="reset"))
    with pytest.raises(EnvironmentException, match="reset broke"):
        env.reset(seed=0)
    obs, _ = env.reset(seed=0)  # B recovered; both lanes reset again
    np.testing.assert_array_equal(obs, local(2).reset(seed=0)[0])
    env.close()


def test_an_autoreset_that_fails_under_same_step_is_raised(net: Network) -> None:
    a, _ = cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B], autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    a.on(m.Reset, error("INTERNAL", "autoreset broke", op="reset"))
    with pytest.raises(EnvironmentException, match="autoreset broke"):
        for _ in range(
            200
        ):  # until lane 0's episode ends (CartPole falls within 200 pushes one way)
            env.step(np.array([1, 0]))
    env.close()


@pytest.mark.parametrize("when", ["step", "reset"])
def test_an_endpoint_whose_socket_fails_on_sending_is_lost(net: Network, when: str) -> None:
    _, b = cartpoles(net, A, B)
    env = rnp.RemoteVectorEnv([A, B])
    env.reset(seed=0)
    b.connections[0].send_error = OSError(5, "Input/output error")
    with pytest.raises(EndpointLost, match=r"endpoint 1 .* was lost: sending failed"):
        if when == "step":
            env.step(np.array([0, 1]))
        else:
            env.reset(seed=1)
    env.close()


def test_reconnecting_to_an_endpoint_that_changed_its_autoreset_mode_is_refused(
    net: Network,
) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), A)
    env = rnp.RemoteVectorEnv([A])
    net.serve_env(
        Lanes([gym.make("CartPole-v1"), gym.make("CartPole-v1")], autoreset="same-step"), A
    )
    with pytest.raises(ValueError, match="now autoresets 'SameStep', not 'NextStep'"):
        env.reconnect(0)
    env.close()
