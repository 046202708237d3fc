"""``RemoteEnv`` / ``RemoteVectorEnv`` against in-memory endpoints: the values a local env gives.

Every endpoint here is a real env served by the server's own driver over an in-memory
connection (``_memory``), so the client sees exactly the bytes a served env sends.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import (
    AlreadyPendingCallError,
    ConnectionLost,
    EnvironmentException,
    InvalidContract,
    NoAsyncCallError,
    ProtocolException,
    RequestTimeout,
    ResetNeeded,
    SessionClosed,
)
from rlmesh.serve import Lanes
from rlmesh.wire import messages as m
from rlmesh.wire.handshake import PROTOCOL_GENERATION

from ._memory import Network, error, hang_up, reply, silence

ENV = "tcp://env.test:1"


class Camera(gym.Env[Any, Any]):
    """A tiny env with a Dict observation, info keys of its own and a rendered frame."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7}

    def __init__(self, info: dict[str, Any] | None = None, frame: Any = "rgb") -> None:
        self.observation_space = spaces.Dict(
            {"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": spaces.Discrete(3)}
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.render_mode = "rgb_array"
        self._info = info or {}
        self._frame = frame
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        start = 0.5 if options and options.get("far") else 0.0
        return {"pos": np.full(2, start, np.float32), "mode": 0}, dict(self._info)

    def step(self, action: Any) -> Any:
        self.t += 1
        pos = np.clip(np.asarray(action, np.float32), -1, 1)
        return {"pos": pos, "mode": self.t % 3}, 0.5, self.t >= 3, False, dict(self._info)

    def render(self) -> Any:
        if self._frame == "rgb":
            return np.full((4, 6, 3), self.t, np.uint8)
        return self._frame


def _policy(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 2, n).tolist()


# -- one env ---------------------------------------------------------------------------------


def test_a_remote_cartpole_gives_the_values_the_local_one_does(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    local = gym.make("CartPole-v1")
    with rnp.RemoteEnv(ENV) as env:
        obs, info = env.reset(seed=11)
        want, _ = local.reset(seed=11)
        np.testing.assert_array_equal(obs, want)
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.flags.writeable
        first_episode = info["episode_ids"]
        assert len(first_episode) == 1
        completed = 0
        for action in _policy(60):
            obs, reward, terminated, truncated, info = env.step(action)
            want_obs, want_reward, want_term, want_trunc, _ = local.step(action)
            np.testing.assert_array_equal(obs, want_obs)
            assert (reward, terminated, truncated) == (want_reward, want_term, want_trunc)
            assert info["episode_ids"] == first_episode
            completed += info["completed_episodes"]
            if terminated or truncated:
                break
        assert terminated and completed == 1  # the episode ended once, counted once
        _, info = env.reset(seed=1)
        assert info["episode_ids"] != first_episode  # a new episode, a new id
    assert env.closed


def test_the_rlmesh_flavour_returns_tensors_with_the_same_bytes(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    env = rlmesh.RemoteEnv(ENV)
    obs, _ = env.reset(seed=3)
    assert isinstance(obs, rlmesh.Tensor) and obs.shape == [4]
    np.testing.assert_array_equal(np.asarray(obs), gym.make("CartPole-v1").reset(seed=3)[0])
    obs, *_ = env.step(0)
    assert isinstance(obs, rlmesh.Tensor)
    env.close()


def test_dict_observations_options_and_box_actions_travel(net: Network) -> None:
    net.serve_env(Camera())
    env = rnp.RemoteEnv(ENV)
    obs, _ = env.reset(options={"far": True})
    np.testing.assert_array_equal(obs["pos"], [0.5, 0.5])
    assert obs["mode"] == 0
    obs, reward, terminated, _, _ = env.step(np.array([0.25, -2.0], np.float32))
    np.testing.assert_array_equal(obs["pos"], [0.25, -1.0])
    assert (obs["mode"], reward, terminated) == (1, 0.5, False)
    env.close()


def test_the_contract_and_spaces_describe_the_served_env(net: Network) -> None:
    net.serve_env(Camera())
    env = rnp.RemoteEnv(ENV)
    assert env.address == ENV
    assert repr(env) == f"RemoteEnv(address='{ENV}')"
    assert env.spec is env.env_contract and env.env_contract.num_envs == 1
    assert env.render_mode == "rgb_array"
    assert env.metadata["render_fps"] == 7
    assert env.metadata is env.metadata  # read once
    assert list(env.observation_space["pos"].shape) == [2]
    assert env.action_space.contains(np.zeros(2, np.float32))
    assert env.observation_space_spec.kind == "dict" and env.action_space_spec.kind == "box"
    assert env.env_id and env.env_id != env.env_contract.id
    assert isinstance(env.selected_workflow_edition, str)
    env.close()


def test_an_env_without_metadata_has_an_empty_mapping(net: Network) -> None:
    bare = Camera()
    bare.metadata = None  # type: ignore[assignment]
    net.serve_env(bare)
    env = rnp.RemoteEnv(ENV)
    assert dict(env.metadata) == {}
    env.close()


def test_render_returns_the_frame_or_none(net: Network) -> None:
    net.serve_env(Camera())
    env = rnp.RemoteEnv(ENV)
    env.reset()
    env.step(np.zeros(2, np.float32))
    frame = env.render()
    assert frame.shape == (4, 6, 3) and frame.dtype == np.uint8 and frame[0, 0, 0] == 1
    env.close()
    net.serve_env(Camera(frame=None), "tcp://blank.test:1")
    blank = rnp.RemoteEnv("tcp://blank.test:1")
    blank.reset()
    assert blank.render() is None
    blank.close()


def test_a_render_reply_that_is_not_a_frame_is_none(net: Network) -> None:
    ep = net.serve_env(Camera())
    env = rnp.RemoteEnv(ENV)
    env.reset()
    ep.then(reply(m.RenderReply(format="png", shape=[1]), [np.zeros(1, np.uint8)]))
    assert env.render() is None  # an unknown format is no frame
    ep.then(reply(m.RenderReply(format="raw", shape=[5, 5, 3]), [np.zeros(7, np.uint8)]))
    assert env.render() is None  # a shape the bytes do not fill
    env.close()


def test_the_env_info_keys_win_over_the_runtime_keys_with_one_warning(
    net: Network, caplog: Any
) -> None:
    net.serve_env(Camera(info={"episode_ids": "mine", "completed_episodes": -1}))
    env = rnp.RemoteEnv(ENV)
    with caplog.at_level(logging.WARNING, logger="rlmesh.client"):
        _, info = env.reset()
        assert info["episode_ids"] == "mine"
        for _ in range(3):
            _, _, _, _, info = env.step(np.zeros(2, np.float32))
            assert info == {"episode_ids": "mine", "completed_episodes": -1}
    shadows = [r for r in caplog.records if "shadows the runtime-reserved key" in r.getMessage()]
    assert len(shadows) == 2  # once per key
    env.close()


def test_step_async_and_step_wait_are_step_in_two_halves(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    local = gym.make("CartPole-v1")
    env = rnp.RemoteEnv(ENV)
    env.reset(seed=2)
    local.reset(seed=2)
    env.step_async(1)
    with pytest.raises(AlreadyPendingCallError, match=r"call step_wait\(\) first"):
        env.step_async(0)
    with pytest.raises(AlreadyPendingCallError):
        env.step(0)
    with pytest.raises(AlreadyPendingCallError, match=r"reset\(\) while a step is in flight"):
        env.reset()
    with pytest.raises(AlreadyPendingCallError, match=r"render\(\) while a step is in flight"):
        env.render()
    obs, *_ = env.step_wait()
    np.testing.assert_array_equal(obs, local.step(1)[0])
    with pytest.raises(NoAsyncCallError, match="no step in flight"):
        env.step_wait()
    env.close()


def test_errors_the_env_raises_reach_the_caller_typed(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    with pytest.raises(ResetNeeded):  # a step before the first reset: the env is not called
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(5)  # not in Discrete(2): refused before sending
    assert not env.closed
    env.close()


def test_a_fatal_env_error_closes_the_client(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    env.reset(seed=0)
    ep.then(error("INTERNAL", "step failed: RuntimeError: boom", recoverable=False, op="step"))
    with pytest.raises(EnvironmentException, match="boom"):
        env.step(0)
    assert env.closed
    with pytest.raises(SessionClosed):
        env.reset()


@pytest.mark.parametrize("road", ["step", "async"])
def test_a_step_reply_that_does_not_decode_ends_the_session(net: Network, road: str) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    env.reset(seed=0)
    ep.then(reply(m.StepReply(obs=[]), [np.zeros(3, np.uint8)]))  # 3 bytes for a float32[4]
    with pytest.raises(ProtocolException):
        if road == "step":
            env.step(0)
        else:
            env.step_async(0)
            env.step_wait()
    assert env.closed


def test_a_reset_reply_that_does_not_decode_ends_the_session(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    ep.then(reply(m.ResetReply(obs=[])))  # no observation at all
    with pytest.raises(ProtocolException):
        env.reset()
    assert env.closed


def test_a_request_timeout_is_the_clients_and_the_next_request_reads_its_own_reply(
    net: Network,
) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV, request_timeout_seconds=0.5)
    env.reset(seed=4)
    ep.then(silence(late=True))
    with pytest.raises(RequestTimeout, match=r"timed out after 0.500s"):
        env.step(0)
    obs, _ = env.reset(seed=4)
    np.testing.assert_array_equal(obs, gym.make("CartPole-v1").reset(seed=4)[0])
    env.close()


def test_a_server_that_goes_away_mid_episode_is_a_lost_connection(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    env.reset(seed=0)
    ep.then(hang_up())
    with pytest.raises(ConnectionLost):
        env.step(0)
    assert env.closed


def test_shutdown_asks_the_endpoint_to_stop(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    assert env.shutdown("tests are over") is True
    assert ep.shut_down and env.closed


def test_connect_failures_are_worded_for_an_env(net: Network) -> None:
    with pytest.raises(
        ConnectionError, match=r"could not connect to an env at 'tcp://nowhere.test:1'"
    ):
        rnp.RemoteEnv("tcp://nowhere.test:1")
    with pytest.raises(ValueError, match="connect_timeout_seconds"):
        rnp.RemoteEnv(ENV, connect_timeout_seconds=-1)
    with pytest.raises(TypeError, match="seed must be an int or None"):
        net.serve_env(gym.make("CartPole-v1"))
        rnp.RemoteEnv(ENV).reset(seed="7")  # type: ignore[arg-type]


def test_a_contract_the_client_cannot_read_is_an_incompatible_peer(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    welcome = m.Welcome(
        generation=PROTOCOL_GENERATION,
        peer=m.PeerInfo(),
        editions=[],
        preferred=None,
        selected="",
        session_id="s",
        contract={"observation_space": "not a space"},
    )
    ep.then(reply(welcome))
    with pytest.raises(InvalidContract, match=f"the env at '{ENV}' published an invalid contract"):
        rnp.RemoteEnv(ENV)
    assert ep.active is None  # the client hung up


def test_the_client_kind_must_match_the_endpoint(net: Network) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    with pytest.raises(ValueError, match=r"serves 2 environments. Use RemoteVectorEnv instead"):
        rnp.RemoteEnv(ENV)
    net.serve_env(gym.make("CartPole-v1"), "tcp://one.test:1")
    with pytest.raises(
        ValueError, match=r"serves a single environment \(num_envs=1\). Use RemoteEnv instead"
    ):
        rnp.RemoteVectorEnv("tcp://one.test:1")


def test_a_client_cannot_be_pickled_and_says_how_to_reconnect(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    with pytest.raises(TypeError, match="a live connection cannot be pickled"):
        pickle.dumps(env)
    env.close()


def test_a_dropped_client_frees_the_endpoint(net: Network) -> None:
    ep = net.serve_env(gym.make("CartPole-v1"))
    env = rnp.RemoteEnv(ENV)
    assert ep.active is not None
    env.__del__()  # what garbage collection does
    assert ep.active is None


# -- vector endpoints --------------------------------------------------------------------------


def test_a_remote_vector_env_gives_the_values_of_the_local_one_across_autoresets(
    net: Network,
) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync"))
    local = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    env = rnp.RemoteVectorEnv(ENV)
    assert env.num_envs == 3 and env.autoreset_mode == "NextStep"
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert list(env.single_observation_space.shape) == [4] and env.single_action_space.n == 2
    obs, info = env.reset(seed=7)
    np.testing.assert_array_equal(obs, local.reset(seed=7)[0])
    ids = list(info["episode_ids"])
    assert len(set(ids)) == 3
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(40):
        actions = rng.integers(0, 2, 3)
        obs, rewards, terms, truncs, info = env.step(actions)
        want = local.step(actions)
        np.testing.assert_array_equal(obs, want[0])
        np.testing.assert_array_equal(rewards, want[1])
        np.testing.assert_array_equal(terms, want[2])
        np.testing.assert_array_equal(truncs, want[3])
        assert info["completed_episodes"] == int((terms | truncs).sum())
        ended += info["completed_episodes"]
    assert ended >= 1  # some lane ended and was autoreset along the way
    assert info["episode_ids"] != ids  # the ended lanes run new episodes
    env.close()


def test_an_int_seed_seeds_lane_i_with_seed_plus_i_and_a_list_seeds_each_lane(net: Network) -> None:
    net.serve_env([gym.make("CartPole-v1") for _ in range(3)])
    env = rnp.RemoteVectorEnv(ENV)
    obs, _ = env.reset(seed=[5, 9, 13])
    single = gym.make("CartPole-v1")
    for lane, seed in enumerate([5, 9, 13]):
        np.testing.assert_array_equal(obs[lane], single.reset(seed=seed)[0])
    obs, _ = env.reset(seed=20)
    np.testing.assert_array_equal(obs[2], single.reset(seed=22)[0])
    with pytest.raises(ValueError, match=r"expected 3 seeds \(one per lane\), got 2"):
        env.reset(seed=[1, 2])
    env.close()


def test_a_partial_reset_returns_the_full_batch(net: Network) -> None:
    net.serve_env([gym.make("CartPole-v1") for _ in range(3)])
    env = rnp.RemoteVectorEnv(ENV)
    with pytest.raises(EnvironmentException, match=r"needs a full reset\(\) first"):
        env.reset(env_indices=[1])
    before, info = env.reset(seed=0)
    ids = list(info["episode_ids"])
    env.step(np.array([0, 1, 0]))
    stepped, *_ = env.step(np.array([1, 1, 1]))
    obs, info = env.reset(seed=[42], env_indices=[1])
    np.testing.assert_array_equal(obs[1], gym.make("CartPole-v1").reset(seed=42)[0])
    np.testing.assert_array_equal(obs[[0, 2]], stepped[[0, 2]])  # the other lanes' latest
    assert info["episode_ids"][0] == ids[0] and info["episode_ids"][1] != ids[1]
    env.close()


def test_with_autoreset_disabled_an_ended_lane_stays_done_and_is_counted_once(net: Network) -> None:
    net.serve_env(Lanes([Camera(), Camera()], autoreset="disabled"))
    env = rnp.RemoteVectorEnv(ENV)
    assert env.autoreset_mode == "Disabled"
    env.reset()
    counts = []
    for _ in range(4):
        _, _, terms, _, info = env.step(np.zeros((2, 2), np.float32))
        counts.append(info["completed_episodes"])
    assert counts[:3] == [0, 0, 2] and terms.all()
    assert sum(counts) == 2
    env.close()


def test_a_vector_step_reply_without_its_lane_arrays_ends_the_session(net: Network) -> None:
    ep = net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    env = rnp.RemoteVectorEnv(ENV)
    env.reset(seed=0)
    ep.then(reply(m.StepReply(obs=[]), [np.zeros((2, 4), np.float32)]))
    with pytest.raises(ProtocolException, match="carries no reward/termination lanes"):
        env.step(np.array([0, 1]))
    assert env.closed


def test_a_vector_step_reply_with_short_lane_arrays_ends_the_session(net: Network) -> None:
    ep = net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    env = rnp.RemoteVectorEnv(ENV)
    env.reset(seed=0)
    lanes = [
        np.zeros((2, 4), np.float32),
        np.zeros(2, np.float64),
        np.zeros(1, np.uint8),
        np.zeros(2, np.uint8),
    ]
    ep.then(reply(m.StepReply(obs=[]), lanes))
    with pytest.raises(ProtocolException, match="carries 1 bytes for 2 lanes"):
        env.step(np.array([0, 1]))
    assert env.closed


def test_the_rlmesh_vector_flavour_decodes_lanes_to_tensors(net: Network) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    env = rlmesh.RemoteVectorEnv(ENV)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, rlmesh.Tensor) and obs.shape == [2, 4]
    obs, rewards, terms, truncs, _ = env.step(np.array([0, 1]))
    assert isinstance(obs, rlmesh.Tensor)
    assert np.asarray(rewards).tolist() == [1.0, 1.0]
    assert not np.asarray(terms).any() and not np.asarray(truncs).any()
    env.close()


class Arm(gym.Env[Any, Any]):
    """A Dict action (two leaves) and a Tuple observation (a box and a discrete leaf)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Tuple(
            (spaces.Box(-5.0, 5.0, (2,), np.float32), spaces.Discrete(4))
        )
        self.action_space = spaces.Dict(
            {"move": spaces.Box(-1.0, 1.0, (2,), np.float32), "grip": spaces.Discrete(2)}
        )
        self.pos = np.zeros(2, np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.pos = np.full(2, float(seed or 0), np.float32)
        return (self.pos.copy(), 0), {}

    def step(self, action: Any) -> Any:
        self.pos = self.pos + np.asarray(action["move"], np.float32)
        return (self.pos.copy(), int(action["grip"]) + 1), 0.0, False, False, {}


@pytest.mark.parametrize("road", ["step", "async"])
def test_a_dict_action_and_a_tuple_observation_travel(net: Network, road: str) -> None:
    net.serve_env(Arm())
    env = rnp.RemoteEnv(ENV)
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs[0], [1.0, 1.0])
    action = {"move": np.array([0.5, -0.5], np.float32), "grip": 1}
    if road == "step":
        obs, *_ = env.step(action)
    else:
        env.step_async(action)
        obs, *_ = env.step_wait()
    np.testing.assert_array_equal(obs[0], [1.5, 0.5])
    assert obs[1] == 2
    env.close()


def test_a_partial_reset_of_tree_observations_keeps_the_other_lanes(net: Network) -> None:
    net.serve_env([Arm(), Arm(), Arm()])
    env = rnp.RemoteVectorEnv(ENV)
    env.reset(seed=[1, 2, 3])
    moved, *_ = env.step({"move": np.ones((3, 2), np.float32), "grip": np.array([0, 1, 0])})
    obs, _ = env.reset(seed=[9], env_indices=[2])
    np.testing.assert_array_equal(obs[0], [[2.0, 2.0], [3.0, 3.0], [9.0, 9.0]])
    np.testing.assert_array_equal(obs[1], [moved[1][0], moved[1][1], 0])
    env.close()


def test_the_dial_keywords_are_the_clients_own_and_wrappers_pass_exactly_those() -> None:
    """A wrapper that owns clients (Gymnasium handles, the fan-out, SB3) forwards its dial
    keywords through ``dial_keywords(locals())``: each name must be a keyword of the
    client's constructor, and only the names a wrapper takes are passed."""
    import inspect

    from rlmesh.client._dial import DIAL_KEYWORDS, dial_keywords
    from rlmesh.client._env import RemoteEnv

    params = inspect.signature(RemoteEnv.__init__).parameters
    assert set(DIAL_KEYWORDS) <= {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}

    def wrapper(
        address: str,
        *,
        connect_timeout_seconds: float | None = None,
        token: str | None = None,
        episode_info: bool = False,
    ) -> dict[str, object]:
        return dial_keywords(locals())

    assert wrapper("x", token="t") == {"connect_timeout_seconds": None, "token": "t"}
