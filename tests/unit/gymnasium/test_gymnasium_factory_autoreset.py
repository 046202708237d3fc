"""build_env / EnvFactory.serve / load_env_target pick the lanes' autoreset mode (issue 12)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from rlmesh._spawn.recipe import load_env_target
from rlmesh.authoring import EnvFactory, build_env
from rlmesh.serve import Lanes
from rlmesh.serve._driven import driven_env


class CartPoleFactory(EnvFactory):
    def make(self) -> gym.Env:  # type: ignore[type-arg]
        return gym.make("CartPole-v1")


def test_factory_lanes_autoreset_next_step_by_default_and_as_asked() -> None:
    _, lanes = build_env(CartPoleFactory(), num_envs=2)
    assert isinstance(lanes, Lanes) and driven_env(lanes).autoreset == "NextStep"
    _, lanes = build_env(CartPoleFactory(), num_envs=2, autoreset="disabled")
    assert driven_env(lanes).autoreset == "Disabled"


def test_factory_vector_fan_out_takes_the_autoreset_mode() -> None:
    _, vec = build_env(
        CartPoleFactory(), num_envs=2, vectorization_mode="sync", autoreset="same-step"
    )
    assert vec.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
    vec.close()


@pytest.mark.parametrize(
    ("mode", "wire"), [(None, "NextStep"), ("disabled", "Disabled"), ("same-step", "SameStep")]
)
def test_the_cli_loader_builds_lanes_with_the_requested_mode(mode: str | None, wire: str) -> None:
    env, _ = load_env_target("CartPole-v1", num_envs=2, autoreset=mode)
    assert driven_env(env).autoreset == wire
    env, _ = load_env_target("CartPole-v1", num_envs=2, vectorization_mode="sync", autoreset=mode)
    assert driven_env(env).autoreset == wire
    env.close()


def test_autoreset_on_a_single_env_is_refused() -> None:
    with pytest.raises(ValueError, match="--num-envs"):
        load_env_target("CartPole-v1", autoreset="next-step")
