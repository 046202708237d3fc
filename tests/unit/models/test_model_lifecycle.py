"""Model construction modes, rejections and lifecycle hooks (MOD-2..11, DELTA-28/29/34/35)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlmesh.models import Model, ModelBase, NumpyModel


def test_wrapping_a_bare_callable_makes_it_predict() -> None:
    # MOD-3
    m = Model(lambda obs: obs + 1)
    assert m.predict(1) == 2
    assert m._corners.defined == ("predict",)


def test_repr_is_the_class_name_with_empty_parens() -> None:
    # MOD-10
    assert repr(Model(lambda o: o)) == "Model()"
    assert repr(NumpyModel(lambda o: o)) == "NumpyModel()"


def test_a_policy_object_contributes_corners_hooks_and_spec() -> None:
    # MOD-4
    events = []

    class Policy:
        spec = "policy-spec"

        def predict(self, obs: Any) -> Any:
            return obs

        def predict_batch(self, obs: Any) -> Any:
            return obs

        def reset(self) -> None:
            events.append("reset")

        def close(self) -> None:
            events.append("close")

    m = NumpyModel(Policy())
    assert set(m._corners.defined) == {"predict", "predict_batch"}
    assert m._spec == "policy-spec"
    m._fire_episode_end("e1")
    m.close()
    m.close()
    assert events == ["reset", "close"]


def test_a_policy_class_is_instantiated_once_and_load_is_never_called() -> None:
    made = []

    class Policy:
        def __init__(self) -> None:
            made.append(1)

        def load(self) -> None:  # pragma: no cover - must not run
            raise AssertionError("load must not be called on a wrapped policy")

        def predict(self, obs: Any) -> Any:
            return 0

    NumpyModel(Policy)
    assert made == [1]


def test_spec_kwarg_wins_over_the_policy_and_class_spec() -> None:
    class Policy:
        spec = "policy"

        def predict(self, obs: Any) -> Any:
            return 0

    assert NumpyModel(Policy(), spec="kwarg")._spec == "kwarg"

    class Sub(NumpyModel):
        spec = "class"

        def predict(self, obs: Any) -> Any:
            return 0

    assert Sub()._spec == "class"
    assert Sub(spec="kwarg")._spec == "kwarg"


@pytest.mark.parametrize("source", [Model(lambda o: o), Model, NumpyModel])
def test_wrapping_a_model_is_refused_with_a_fix(source: Any) -> None:
    # MOD-5
    with pytest.raises(TypeError, match="Instantiate your Model subclass"):
        Model(source)


def test_a_non_callable_source_without_predict_is_refused() -> None:
    with pytest.raises(TypeError, match="predict callable or a policy object"):
        Model(42)


def test_a_subclass_overriding_no_corner_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a predict callable or an overridden corner"):
        Model()


def test_subclass_load_runs_once_in_init() -> None:
    # MOD-6
    loads = []

    class Sub(NumpyModel):
        def load(self, **kwargs: Any) -> None:
            loads.append(kwargs)

        def predict(self, obs: Any) -> Any:
            return 0

    Sub()
    assert loads == [{}]


def test_defining_reset_on_a_subclass_is_a_type_error_at_class_creation() -> None:
    # DELTA-28
    with pytest.raises(
        TypeError, match=r"\.reset is never called: the Model episode hook is on_episode_end"
    ):

        class Bad(Model):
            def predict(self, obs: Any) -> Any:
                return 0

            def reset(self) -> None:
                pass


def test_on_episode_end_receives_the_id_when_it_takes_a_positional_parameter() -> None:
    got: list[Any] = []

    class Sub(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return 0

        def on_episode_end(self, episode_id: str = "") -> None:
            got.append(episode_id)

    Sub()._fire_episode_end("abc")
    NumpyModel(lambda o: 0, on_episode_end=lambda: got.append("noarg"))._fire_episode_end("x")
    NumpyModel(lambda o: 0, on_episode_end=lambda eid: got.append(("arg", eid)))._fire_episode_end(
        "y"
    )
    assert got == ["abc", "noarg", ("arg", "y")]


def test_explicit_hook_kwargs_override_the_subclass_hooks() -> None:
    # MOD-7
    got = []

    class Sub(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return 0

        def on_episode_end(self, episode_id: str = "") -> None:  # pragma: no cover - overridden
            got.append("subclass")

        def close(self) -> None:  # pragma: no cover - overridden
            got.append("subclass close")

    m = Sub(on_episode_end=lambda: got.append("kwarg"), on_close=lambda: got.append("kwarg close"))
    m._fire_episode_end("e")
    m.close()
    assert got == ["kwarg", "kwarg close"]


def test_close_is_idempotent_and_fires_a_subclass_override_once() -> None:
    # DELTA-29: an override is wrapped, idempotent even without super()
    closes = []

    class Sub(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return 0

        def close(self) -> None:
            closes.append(1)

    m = Sub()
    m.close()
    m.close()
    assert closes == [1]


def test_native_chunk_without_a_chunk_corner_is_a_type_error() -> None:
    # DELTA-34
    class K(NumpyModel):
        native_chunk = 4

        def predict(self, obs: Any) -> Any:
            return 0

    with pytest.raises(TypeError, match="native_chunk=4"):
        K()


def test_from_config_skips_the_automatic_load_and_validates_the_binding() -> None:
    # DELTA-35
    loads = []

    class Sub(NumpyModel):
        def load(self, scale: int = 1) -> None:
            loads.append(scale)

        def predict(self, obs: Any) -> Any:
            return 0

    Sub.from_config(scale=3)
    assert loads == [3]
    from rlmesh.params import UnknownParamError

    with pytest.raises(UnknownParamError, match="no \\*\\*kwargs to forward: z"):
        Sub.from_config(z=1)
    with pytest.raises(TypeError, match="defines a corner"):
        NumpyModel.from_config()


def test_base_corners_raise_not_implemented_when_undefined() -> None:
    m = NumpyModel(lambda o: 0)
    with pytest.raises(NotImplementedError, match="predict_batch"):
        m.predict_batch(np.zeros((1, 1)))
    assert isinstance(m, ModelBase)
