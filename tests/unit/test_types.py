"""rlmesh.types: structural protocols and value aliases (seed 000 "Types", api-surface A.6)."""

from __future__ import annotations

import typing
from typing import Any

import pytest

import rlmesh.types as types
from rlmesh.types import (
    EnvLike,
    HasAddress,
    HasEnvContract,
    PredictContext,
    SpaceLike,
    SupportsMake,
    SupportsResetStep,
    VectorEnvLike,
)

A6_NAMES = [
    "BatchPredictContext", "EnvLike", "EnvTarget", "HasAddress", "HasEnvContract", "InfoDict",
    "LocalEnvTarget", "Metadata", "PredictContext", "PrimitiveValue", "SpaceLike", "SpecArg",
    "SupportsMake", "SupportsResetStep", "Value", "VectorEnvLike", "ViewArg",
]  # fmt: skip


def test_rlmesh_types_exports_exactly_the_17_names_of_A6() -> None:
    assert sorted(types.__all__) == sorted(A6_NAMES)
    for name in A6_NAMES:
        assert getattr(types, name) is not None


class PlainEnv:
    """An env that inherits nothing: structural typing is enough."""

    def __init__(self) -> None:
        from rlmesh.spaces import Box, Discrete

        self.observation_space = Box(-1.0, 1.0, (2,))
        self.action_space = Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, False, {}

    def close(self) -> None:
        pass


class NotAnEnv:
    def reset(self) -> None: ...


def test_a_plain_class_satisfies_EnvLike_and_SupportsResetStep() -> None:
    env = PlainEnv()
    assert isinstance(env, EnvLike) and isinstance(env, SupportsResetStep)
    assert isinstance(env.observation_space, SpaceLike) and isinstance(env.action_space, SpaceLike)
    assert not isinstance(env, VectorEnvLike)
    assert not isinstance(NotAnEnv(), EnvLike) and not isinstance(NotAnEnv(), SupportsResetStep)


def test_gymnasium_CartPole_satisfies_EnvLike_and_its_spaces_SpaceLike() -> None:
    gym = pytest.importorskip("gymnasium")
    env = gym.make("CartPole-v1")
    try:
        assert isinstance(env, EnvLike) and isinstance(env, SupportsResetStep)
        assert isinstance(env.observation_space, SpaceLike) and isinstance(
            env.action_space, SpaceLike
        )
        assert not isinstance(env, VectorEnvLike) and not isinstance(env, SupportsMake)
    finally:
        env.close()


def test_a_gymnasium_vector_env_satisfies_VectorEnvLike() -> None:
    gym = pytest.importorskip("gymnasium")
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        assert isinstance(env, VectorEnvLike)
    finally:
        env.close()


def test_an_EnvFactory_satisfies_SupportsMake() -> None:
    from rlmesh.authoring import EnvFactory

    class F(EnvFactory):
        def make(self) -> Any:
            return PlainEnv()

    assert isinstance(F(), SupportsMake) and not isinstance(F(), SupportsResetStep)


def test_HasAddress_and_HasEnvContract_are_structural() -> None:
    class Handle:
        address = "tcp://127.0.0.1:1"
        env_contract = object()

    assert isinstance(Handle(), HasAddress) and isinstance(Handle(), HasEnvContract)
    assert not isinstance(object(), HasAddress) and not isinstance(object(), HasEnvContract)


def test_PredictContext_is_a_TypedDict_with_every_key_required() -> None:
    assert PredictContext.__required_keys__ == frozenset(
        {"episode_id", "episode_seed", "predict_index", "predict_seed", "state"}
    )
    ctx: PredictContext = {"episode_id": "e", "episode_seed": None, "predict_index": 0,
                           "predict_seed": None, "state": {}}  # fmt: skip
    assert ctx["predict_index"] == 0
    assert typing.get_origin(types.BatchPredictContext) is list


def test_value_aliases_have_the_documented_members() -> None:
    assert set(typing.get_args(types.PrimitiveValue)) == {type(None), bool, int, float, str, bytes}
    assert typing.get_origin(types.InfoDict) is dict and typing.get_args(types.InfoDict)[1] is Any
    assert typing.get_args(types.Metadata)[1] is object
    local = set(typing.get_args(types.LocalEnvTarget))
    assert local == {SupportsResetStep, SupportsMake, HasAddress, str}
    assert set(typing.get_args(types.EnvTarget)) == local | {HasEnvContract}
    assert type(None) in typing.get_args(types.SpecArg) and str in typing.get_args(types.ViewArg)
