"""Importable describe/serve targets for the authoring tests ("module:Attr" strings, CLI).

This module must not import gymnasium: the CLI test checks that describing
``TinyFactory`` leaves it out of ``sys.modules``.
"""

from __future__ import annotations

from typing import Any

from rlmesh.authoring import EnvFactory, Variant
from rlmesh.params import Param, ParamSpec, Vector
from rlmesh.spaces import SpaceSpec


class TinyEnv:
    """A dependency-free env whose spaces are plain SpaceSpecs."""

    def __init__(self, size: int = 2, label: str = "tiny") -> None:
        self.observation_space = SpaceSpec._box((size,), "float32", -1.0, 1.0)
        self.action_space = SpaceSpec._discrete(3)
        self.metadata: dict[str, Any] = {"label": label}
        self.closed = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return [0.0] * self.observation_space.shape[0], {}

    def step(self, action: Any) -> Any:
        return [0.0] * self.observation_space.shape[0], 0.0, False, False, {}

    def close(self) -> None:
        self.closed += 1


BUILT: list[TinyEnv] = []


class TinyFactory(EnvFactory):
    """Two declared params, one signature-only param, two variants."""

    params = ParamSpec(
        Param("size", int, choices=(2, 3), description="observation width"),
        Param("goal", Vector(2), group="task"),
    )

    @classmethod
    def enumerate_variants(cls) -> list[Variant]:
        return [Variant("small", {"size": 2}, name="Small"), Variant("large", {"size": 3})]

    def make(
        self, size: int = 2, goal: tuple[float, float] = (0.0, 0.0), label: str = "tiny"
    ) -> TinyEnv:
        print("TinyFactory.make printed this")  # describe must keep stdout clean
        env = TinyEnv(size, label)
        BUILT.append(env)
        return env


def make_tiny(size: int = 2) -> TinyEnv:
    """A bare make callable."""
    return TinyEnv(size)


def predict_zero(observation: Any) -> int:
    """A bare predict callable."""
    return 0


class DuckPolicy:
    """A duck-typed model: no rlmesh base class."""

    spec = None
    native_chunk = 4

    def predict(self, observation: Any) -> int:
        return 0

    def predict_chunk(self, observation: Any, horizon: int) -> list[int]:
        return [0] * horizon

    def load(self, checkpoint: str = "default", temperature: float = 1.0) -> None:
        raise AssertionError("describe must never construct or load a model")

    def __init__(self) -> None:
        raise AssertionError("describe must never construct a model")


class Outer:
    """Nested attribute paths resolve ("module:Outer.Inner")."""

    class Inner(TinyFactory):
        pass
