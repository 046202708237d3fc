"""Vector endpoints through a real server: autoreset modes, episode ids, seeds, partial reset.

The lanes run :class:`CountdownEnv` episodes of different lengths (2, 3 and 4 steps), so
each lane ends on a known step. Covers SRV-3, SRV-14, AR-1, AR-5, AR-8, AR-9, AR-10,
INFO-1..3, MET-3, CLT-4, CLT-7, CLT-8, DELTA-14 (lanes from a list of envs) and DELTA-15
(a 1-lane vector env served as a scalar env).
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from integration_envs import CountdownEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import InvalidAction, Unsupported

pytestmark = pytest.mark.timeout(60)

LENGTHS = (2, 3, 4)
NOOP = np.zeros(3, dtype=np.int64)


def vector_env(
    mode: AutoresetMode | None = None, lengths: tuple[int, ...] = LENGTHS
) -> SyncVectorEnv:
    fns = [lambda n=n: CountdownEnv(n) for n in lengths]
    return SyncVectorEnv(fns) if mode is None else SyncVectorEnv(fns, autoreset_mode=mode)


def t_of(obs: np.ndarray) -> list[int]:
    return obs.reshape(-1).tolist()


# -- autoreset modes (AR-1, AR-5, AR-8, AR-9) --------------------------------------------------


def test_SyncVectorEnv_is_served_NEXT_STEP_and_each_lane_autoresets_on_the_following_step(serve):
    server = serve(vector_env())  # gymnasium's default mode
    assert server.env_contract.num_envs == 3
    with rnp.RemoteVectorEnv(server.address) as envs:
        assert envs.num_envs == 3
        assert envs.autoreset_mode == "NextStep"
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP  # MET-3: the enum again
        obs, info = envs.reset(seed=0)
        assert obs.shape == (3, 1) and obs.dtype == np.int64
        ids0 = info["episode_ids"]
        assert len(ids0) == 3 and len(set(ids0)) == 3  # INFO-1: one fresh id per lane

        obs, rew, term, trunc, info = envs.step(NOOP)
        assert t_of(obs) == [1, 1, 1] and info["completed_episodes"] == 0  # INFO-2: always present
        assert info["episode_ids"] == ids0

        obs, rew, term, trunc, info = envs.step(NOOP)  # lane 0 ends
        assert term.tolist() == [True, False, False] and not trunc.any()
        assert rew.dtype == np.float64 and term.dtype == np.bool_
        assert info["completed_episodes"] == 1
        assert (
            info["episode_ids"] == ids0
        )  # AR-9: the terminal obs still belongs to the old episode

        obs, rew, term, trunc, info = envs.step(NOOP)  # lane 0 autoresets; lane 1 ends
        assert t_of(obs) == [0, 3, 3]
        assert rew.tolist() == [0.0, 1.0, 1.0]  # AR-6: the autoreset step reports reward 0
        assert term.tolist() == [False, True, False]
        assert info["completed_episodes"] == 1
        ids = info["episode_ids"]
        assert ids[0] != ids0[0] and ids[1:] == ids0[1:]  # lane 0 rolled to a fresh id

        obs, rew, term, trunc, info = envs.step(NOOP)
        assert t_of(obs) == [1, 0, 4]
        assert info["episode_ids"][0] == ids[0]  # the rolled id stays for the new episode
        assert info["episode_ids"][1] not in ids0


def test_a_vector_env_configured_SAME_STEP_resets_the_lane_inside_the_terminal_step(serve):
    server = serve(vector_env(AutoresetMode.SAME_STEP))
    with rnp.RemoteVectorEnv(server.address) as envs:
        assert envs.autoreset_mode == "SameStep"
        assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        _, info = envs.reset(seed=0)
        ids0 = info["episode_ids"]
        envs.step(NOOP)
        obs, rew, term, _, info = envs.step(NOOP)  # lane 0 ends and is reset in the same step
        assert term.tolist() == [True, False, False]
        assert t_of(obs) == [0, 2, 2]
        # gymnasium's SAME_STEP terminal obs; info values arrive as plain data (seed 000)
        assert info["final_obs"][0] == [2]
        assert info["completed_episodes"] == 1
        assert info["episode_ids"] == ids0
        obs, rew, term, _, info = envs.step(NOOP)
        assert t_of(obs) == [1, 0, 3]  # lane 1 ended and restarted this step
        assert rew.tolist() == [1.0, 1.0, 1.0]  # no zero-reward autoreset step in SAME_STEP
        assert info["episode_ids"][0] != ids0[0]
        assert info["episode_ids"][1:] == ids0[1:]


def test_a_DISABLED_vector_env_keeps_a_done_lane_done_until_a_partial_reset(serve):
    server = serve(vector_env(AutoresetMode.DISABLED))
    with rnp.RemoteVectorEnv(server.address) as envs:
        assert envs.autoreset_mode == "Disabled"
        _, info = envs.reset(seed=0)
        ids0 = info["episode_ids"]
        envs.step(NOOP)
        obs, _, term, _, info = envs.step(NOOP)
        assert term.tolist() == [True, False, False]
        assert info["episode_ids"] == ids0 and info["completed_episodes"] == 1
        # AR-8: no autoreset; the id is not rolled; the caller resets the lane explicitly
        obs, info = envs.reset(env_indices=[0], seed=[40])
        assert t_of(obs) == [0, 2, 2]  # the full batch: lane 0 fresh, the others as last seen
        assert info["episode_ids"][0] != ids0[0] and info["episode_ids"][1:] == ids0[1:]
        assert info["seed"][0] == 40
        obs, _, term, _, info = envs.step(NOOP)
        assert t_of(obs) == [1, 3, 3]
        assert term.tolist() == [False, True, False]
        assert info["episode_ids"][0] != ids0[0]


# -- lanes from a list of scalar envs (DELTA-14) ---------------------------------------------


def test_lanes_with_autoreset_disabled_are_served_with_vector_style_info(serve):
    # issue 12: a plain list now autoresets NEXT_STEP; DISABLED is the explicit Lanes(..., "disabled")
    lanes = [CountdownEnv(n) for n in LENGTHS]
    server = serve(rlmesh.serve.Lanes(lanes, autoreset="disabled"))
    assert server.env_contract.num_envs == 3
    with rlmesh.RemoteVectorEnv(server.address) as envs:  # the plain client: Tensor batches
        assert envs.autoreset_mode == "Disabled"
        obs, info = envs.reset(seed=[5, None, 7])
        assert isinstance(obs, rlmesh.Tensor) and obs.shape == [3, 1]
        assert [lane.resets for lane in lanes] == [
            [5],
            [None],
            [7],
        ]  # per-lane seeds, None = no seed
        assert [i["seed"] for i in info["final_info"]] == [5, -1, 7]
        assert info["_final_info"] == [True, True, True]
        ids0 = info["episode_ids"]
        envs.step([0, 0, 0])
        obs, rew, term, trunc, info = envs.step([0, 0, 0])
        assert np.asarray(term).tolist() == [True, False, False]
        assert np.asarray(rew).tolist() == [1.0, 1.0, 1.0]
        assert [i["t"] for i in info["final_info"]] == [2, 2, 2]
        assert info["_final_info"] == [True, False, False]
        assert info["completed_episodes"] == 1 and info["episode_ids"] == ids0
        _, _, term, _, info = envs.step([0, 0, 0])  # lane 0 stays done: only lane 1's end counts
        assert np.asarray(term).tolist() == [True, True, False] and info["completed_episodes"] == 1
        obs, info = envs.reset(env_indices=[0])  # lanes always support partial reset
        assert np.asarray(obs).reshape(-1).tolist() == [0, 3, 3]
        assert info["episode_ids"][0] != ids0[0] and info["episode_ids"][1:] == ids0[1:]
        assert lanes[0].resets == [5, None] and lanes[1].resets == [None]


def test_an_int_seed_on_a_lane_endpoint_seeds_lane_i_with_seed_plus_i(serve):
    lanes = [CountdownEnv(2) for _ in range(3)]
    server = serve(lanes)
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=100)
    assert [lane.resets for lane in lanes] == [[100], [101], [102]]


# -- seeds (OPP-26, LIM-13) ----------------------------------------------------------------------


def test_an_int_seed_seeds_lane_i_with_seed_plus_i_and_a_list_seeds_each_lane(serve):
    server = serve(vector_env())
    with rnp.RemoteVectorEnv(server.address) as envs:
        _, info = envs.reset(seed=10)
        assert info["seed"] == [10, 11, 12]
        _, info = envs.reset(seed=[3, 1, 4])
        assert info["seed"] == [3, 1, 4]
        _, info = envs.reset()
        assert info["seed"] == [-1, -1, -1]
        with pytest.raises(ValueError, match="expected 3 seeds"):
            envs.reset(seed=[1, 2])


def test_a_native_gymnasium_vector_env_reset_with_an_int_seed_matches_a_local_one(serve):
    server = serve(gym.make_vec("CartPole-v1", num_envs=3))
    local = gym.make_vec("CartPole-v1", num_envs=3)
    with rnp.RemoteVectorEnv(server.address) as envs:
        remote_obs, _ = envs.reset(seed=1)
    local_obs, _ = local.reset(seed=1)
    np.testing.assert_array_equal(remote_obs, local_obs)


# -- partial reset (AR-10) ----------------------------------------------------------------------


def test_partial_reset_on_a_NEXT_STEP_gymnasium_vector_env_resets_only_those_lanes(serve):
    """AR-10: a Gymnasium VectorEnv implements subset reset (``reset_mask``), NEXT_STEP too."""
    server = serve(vector_env())
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=0)
        envs.step(NOOP)
        obs, _ = envs.reset(env_indices=[1])
        assert t_of(obs) == [1, 0, 1]  # lane 1 starts over; the others keep their episode
        obs, *_ = envs.step(NOOP)
        assert t_of(obs) == [2, 1, 2]


class _DuckNextStep:
    """A duck-typed NEXT_STEP vector env (num_envs + batched reset/step): no subset reset."""

    def __init__(self) -> None:
        self._env = vector_env()
        self.num_envs = self._env.num_envs
        self.single_observation_space = self._env.single_observation_space
        self.single_action_space = self._env.single_action_space
        self.metadata = {"autoreset_mode": "NextStep"}

    def reset(self, *, seed=None, options=None):
        return self._env.reset(seed=seed)

    def step(self, action):
        return self._env.step(action)

    def close(self) -> None:
        self._env.close()


def test_partial_reset_on_a_duck_typed_NEXT_STEP_vector_env_is_UNSUPPORTED_and_the_session_survives(
    serve,
):
    server = serve(_DuckNextStep())
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=0)
        with pytest.raises(Unsupported, match="partial reset") as info:
            envs.reset(env_indices=[1])
        assert info.value.code == "UNSUPPORTED" and info.value.recoverable
        assert isinstance(info.value, rlmesh.EnvironmentException)
        obs, *_ = envs.step(NOOP)
        assert t_of(obs) == [1, 1, 1]


def test_partial_reset_with_bad_indices_is_INVALID_ACTION(serve):
    server = serve([CountdownEnv(3) for _ in range(3)])
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        with pytest.raises(InvalidAction, match="env_indices"):
            envs.reset(env_indices=[3])
        with pytest.raises(ValueError, match="env_indices"):
            envs.reset(env_indices=[1, 1])
        obs, *_ = envs.step(NOOP)  # recoverable: the session lives
        assert t_of(obs) == [1, 1, 1]


def test_partial_reset_before_a_full_reset_is_refused_client_side(serve):
    server = serve([CountdownEnv(3) for _ in range(2)])
    with (
        rnp.RemoteVectorEnv(server.address) as envs,
        pytest.raises(RuntimeError, match="full reset"),
    ):
        envs.reset(env_indices=[0])


# -- arity (DELTA-15, CLT-4) --------------------------------------------------------------------


def test_a_1_lane_vector_env_is_served_as_a_scalar_env(serve):
    server = serve(SyncVectorEnv([lambda: CountdownEnv(2)]))
    contract = server.env_contract
    assert contract.num_envs == 1
    with pytest.raises(ValueError, match="Use RemoteEnv instead"):
        rnp.RemoteVectorEnv(server.address)
    with rnp.RemoteEnv(server.address) as env:
        assert "autoreset_mode" not in env.metadata
        obs, info = env.reset(seed=3)
        assert obs.shape == (1,) and info["seed"] == 3  # batch axis gone, info reduced to lane 0
        obs, reward, terminated, truncated, info = env.step(1)  # the action gains the batch axis
        assert obs.tolist() == [1] and reward == 1.0 and terminated is False
        obs, reward, terminated, truncated, info = env.step(1)
        assert terminated is True and info["completed_episodes"] == 1
        assert not any(k.startswith("_") for k in info)


def test_a_list_of_one_env_is_a_scalar_endpoint(serve):
    server = serve([CountdownEnv(2)])
    assert server.env_contract.num_envs == 1
    with rnp.RemoteEnv(server.address) as env:
        obs, _ = env.reset()
        assert obs.shape == (1,)


def test_RemoteEnv_is_refused_on_a_vector_endpoint_and_the_slot_is_freed(serve):
    server = serve([CountdownEnv(2) for _ in range(3)])
    with pytest.raises(ValueError, match=r"serves 3 environments\. Use RemoteVectorEnv instead\."):
        rnp.RemoteEnv(server.address)
    with pytest.raises(ValueError, match=r"serves 3 environments"):
        rlmesh.RemoteEnv(server.address)
    with rnp.RemoteVectorEnv(server.address) as envs:  # the refused client let go of the session
        assert envs.num_envs == 3


def test_RemoteVectorEnv_is_refused_on_a_scalar_endpoint(serve):
    server = serve(CountdownEnv(2))
    with pytest.raises(ValueError, match=r"serves a single environment.*Use RemoteEnv instead"):
        rlmesh.RemoteVectorEnv(server.address)
    with rnp.RemoteEnv(server.address) as env:
        env.reset()


# -- reserved info keys (INFO-3) ----------------------------------------------------------------


class _ShadowingEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        obs, reward, terminated, truncated, info = super().step(action)
        info["episode_ids"] = "mine"
        return obs, reward, terminated, truncated, info


def test_an_env_info_key_named_episode_ids_shadows_the_runtime_key_and_is_logged_once(
    serve, caplog
):
    server = serve(_ShadowingEnv(10))
    with (
        rnp.RemoteEnv(server.address) as env,
        caplog.at_level(logging.WARNING, logger="rlmesh.client"),
    ):
        _, info = env.reset()
        assert len(info["episode_ids"]) == 1
        for _ in range(3):
            _, _, _, _, info = env.step(0)
            assert info["episode_ids"] == "mine"
            assert info["completed_episodes"] == 0
    assert sum("shadows" in r.getMessage() for r in caplog.records) == 1


# -- batched values and vector env contracts (BKD-3, VAL-3, AR-6) ------------------------------


def test_vector_observations_rewards_and_flags_are_writable_and_never_alias_between_steps(serve):
    server = serve(vector_env())
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=0)
        first = envs.step(NOOP)
        second = envs.step(NOOP)
        for a, b in zip(first[:4], second[:4]):
            assert isinstance(a, np.ndarray) and a.flags.writeable
            assert not np.shares_memory(a, b)
        snapshot = second[0].copy()
        first[0][...] = -1
        np.testing.assert_array_equal(second[0], snapshot)


class _ScriptedVectorEnv:
    """A hand-written 2-lane vector env declaring NEXT_STEP; lane 0 ends on step 1."""

    num_envs = 2
    single_observation_space = gym.spaces.Box(0, 10, (1,), np.int64)
    single_action_space = gym.spaces.Discrete(2)
    metadata = {"autoreset_mode": "NextStep"}

    def __init__(self, rewards_after_end: float = 1.0, lanes_returned: int = 2) -> None:
        self.t = 0
        self.rewards_after_end = rewards_after_end
        self.lanes_returned = lanes_returned

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        self.t = 0
        return np.zeros((2, 1), np.int64), {}

    def step(self, actions):  # type: ignore[no-untyped-def]
        self.t += 1
        obs = np.full((2, 1), self.t, np.int64)
        terminated = np.array([self.t == 1, False])
        reward = (
            np.ones(self.lanes_returned) if self.t == 1 else np.array([self.rewards_after_end, 1.0])
        )
        return obs, reward, terminated, np.zeros(2, bool), {}

    def close(self) -> None:
        pass


def test_a_NEXT_STEP_env_that_skips_the_autoreset_step_breaks_the_contract_fatally(serve):
    server = serve(_ScriptedVectorEnv(rewards_after_end=1.0))
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        _, _, term, _, info = envs.step([0, 0])
        assert term.tolist() == [True, False] and info["completed_episodes"] == 1
        with pytest.raises(
            rlmesh.EnvironmentException, match="NEXT_STEP autoreset contract violated on lane 0"
        ) as exc:
            envs.step([0, 0])  # AR-6: lane 0 owed a reward-0, not-done autoreset step
        assert exc.value.recoverable is False


def test_a_vector_env_returning_the_wrong_number_of_rewards_is_an_INTERNAL_error(serve):
    server = serve(_ScriptedVectorEnv(lanes_returned=3))
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        with pytest.raises(rlmesh.EnvironmentException, match="3 values for 2 lanes"):
            envs.step([0, 0])


def test_a_wrong_number_of_batched_actions_is_a_ValueError_client_side(serve):
    server = serve(vector_env())
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        with pytest.raises(ValueError, match=r"expected 3 batched values, got 2"):
            envs.step([0, 0])  # VAL-15
        obs, *_ = envs.step(NOOP)
        assert t_of(obs) == [1, 1, 1]
