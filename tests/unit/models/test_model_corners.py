"""Corner detection and synthesis (MOD-12..18, DELTA-32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlmesh.models import Model, NumpyModel
from rlmesh.models._corners import CornerShape, analyze_corner
from rlmesh.models._values import first_frame, get_bridge, split_chunk

CORNERS = ("predict", "predict_chunk", "predict_batch", "predict_chunk_batch")


def _numpy_model(defined: str) -> NumpyModel[Any, Any]:
    """A numpy model defining exactly one corner; every corner returns obs + an offset."""

    def predict(self: Any, obs: Any) -> Any:
        return obs + 1

    def predict_chunk(self: Any, obs: Any, h: int) -> Any:
        return np.stack([obs + 10 + i for i in range(3)])

    def predict_batch(self: Any, obs: Any) -> Any:
        return obs + 100

    def predict_chunk_batch(self: Any, obs: Any, h: int) -> Any:
        return np.stack([obs + 1000 + i for i in range(3)], axis=1)

    body = {
        "predict": predict,
        "predict_chunk": predict_chunk,
        "predict_batch": predict_batch,
        "predict_chunk_batch": predict_chunk_batch,
    }
    cls = type("One", (NumpyModel,), {defined: body[defined]})
    return cls()


# -- MOD-14 consequences: which corners each single authored corner yields -------------------

DERIVED = {
    "predict_chunk_batch": {"predict", "predict_chunk", "predict_batch", "predict_chunk_batch"},
    "predict_chunk": {"predict", "predict_chunk"},
    "predict_batch": {"predict", "predict_batch"},
    "predict": {"predict"},
}


@pytest.mark.parametrize("defined", CORNERS)
def test_one_authored_corner_derives_exactly_the_downward_corners(defined: str) -> None:
    # MOD-14: pcb alone => all four; pc alone => p; pb alone => p; p alone => nothing else.
    cs = _numpy_model(defined)._corners
    present = {n for n in CORNERS if getattr(cs, n) is not None}
    assert present == DERIVED[defined]
    assert cs.defined == (defined,)


def test_predict_chunk_batch_alone_gives_all_four_corners_with_consistent_values() -> None:
    m = _numpy_model("predict_chunk_batch")
    obs = np.array([1.0])
    cs = m._corners
    # de-batch pcb for pc: lane 0's full chunk
    np.testing.assert_array_equal(cs.predict_chunk(obs, 3, None), [[1001.0], [1002.0], [1003.0]])
    # de-chunk pcb for pb: frame 0 of every lane
    np.testing.assert_array_equal(
        cs.predict_batch(np.stack([obs, obs + 1]), None), [[1001.0], [1002.0]]
    )
    # predict comes from pb (tie rule: un-chunked)
    np.testing.assert_array_equal(cs.predict(obs, None), [1001.0])


def test_predict_from_chunk_takes_frame_zero() -> None:
    m = _numpy_model("predict_chunk")
    np.testing.assert_array_equal(m.predict(np.array([1.0])), [11.0])


def test_predict_from_batch_wraps_one_lane_batch() -> None:
    m = _numpy_model("predict_batch")
    np.testing.assert_array_equal(m.predict(np.array([1.0])), [101.0])


def test_tie_rule_batch_and_chunk_present_predict_stays_unchunked() -> None:
    class Both(NumpyModel):
        def predict_batch(self, obs: Any) -> Any:
            return obs * 0 + 7

        def predict_chunk(self, obs: Any, h: int) -> Any:
            return np.stack([obs * 0 + 9] * 2)

    np.testing.assert_array_equal(Both().predict(np.array([1.0])), [7.0])


def test_explicit_corners_are_never_overwritten() -> None:
    class Both(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return "mine"

        def predict_chunk_batch(self, obs: Any, h: int) -> Any:
            return np.zeros((len(obs), 2, 1))

    m = Both()
    assert m.predict(np.zeros(1)) == "mine"
    assert m._corners.predict(np.zeros(1), None) == "mine"


def test_native_model_cannot_dechunk_a_chunk_only_model() -> None:
    # MOD-15: the plain bridge has no array leaves to slice.
    class ChunkOnly(Model):
        def predict_chunk(self, obs: Any, h: int) -> Any:
            return [1, 2]

    with pytest.raises(TypeError, match="could not derive predict"):
        ChunkOnly()


def test_native_model_batched_corner_gets_a_per_lane_list() -> None:
    seen = []

    class Batch(Model):
        def predict_batch(self, obs: Any) -> Any:
            seen.append(obs)
            return [o for o in obs]

    assert Batch().predict(5) == 5
    assert seen == [[5]]


# -- MOD-13 / MOD-18 / DELTA-32: signature detection -----------------------------------------


@pytest.mark.parametrize(
    ("fn", "chunk", "expected"),
    [
        (lambda obs: 0, False, CornerShape("none", "none")),
        (lambda obs, context: 0, False, CornerShape("none", "keyword")),
        (lambda obs, *args: 0, False, CornerShape("none", "positional")),
        (lambda obs, extra=None: 0, False, CornerShape("none", "none")),
        (lambda obs: 0, True, CornerShape("none", "none")),
        (lambda obs, h: 0, True, CornerShape("positional", "none")),
        (lambda obs, h, context: 0, True, CornerShape("positional", "keyword")),
        (lambda obs, context: 0, True, CornerShape("none", "keyword")),
        (lambda obs, *, execution_horizon: 0, True, CornerShape("keyword", "none")),
        (lambda obs, *args: 0, True, CornerShape("positional", "positional")),
    ],
)
def test_corner_signatures_are_read_once_into_a_calling_convention(
    fn: Any, chunk: bool, expected: CornerShape
) -> None:
    assert analyze_corner(fn, chunk=chunk) == expected


def test_an_unrelated_optional_positional_param_is_not_a_context() -> None:
    calls = []
    m = NumpyModel(lambda obs, extra=None: calls.append(extra) or 0)
    m._corners.predict(np.zeros(1), {"episode_id": "x"})
    assert calls == [None]
    assert m._corners.wants_context["predict"] is False


def test_chunk_corner_receives_the_horizon_positionally_or_by_keyword() -> None:
    got = []

    class Pos(NumpyModel):
        def predict_chunk(self, obs: Any, horizon: int) -> Any:
            got.append(("pos", horizon))
            return np.zeros((horizon, 1))

    class Kw(NumpyModel):
        def predict_chunk(self, obs: Any, *, execution_horizon: int) -> Any:
            got.append(("kw", execution_horizon))
            return np.zeros((execution_horizon, 1))

    class Swallow(NumpyModel):
        def predict_chunk(self, obs: Any) -> Any:
            got.append(("none", None))
            return np.zeros((2, 1))

    for cls in (Pos, Kw, Swallow):
        cls()._corners.predict_chunk(np.zeros(1), 4, None)
    assert got == [("pos", 4), ("kw", 4), ("none", None)]


def test_derived_predict_from_a_batched_context_corner_passes_a_one_element_list() -> None:
    # DELTA-32: a predict derived from a batched corner gets [ctx].
    seen = []

    class B(NumpyModel):
        def predict_batch(self, obs: Any, context: Any) -> Any:
            seen.append(context)
            return obs

    cs = B()._corners
    assert cs.wants_context["predict"] is True
    cs.predict(np.zeros(1), {"episode_id": "e"})
    assert seen == [[{"episode_id": "e"}]]


# -- MOD-16 / MOD-17: frames -----------------------------------------------------------------


def test_first_frame_recurses_into_mappings_and_takes_element_zero() -> None:
    assert first_frame({"a": [3, 4], "b": np.array([[1], [2]])})["a"] == 3
    assert first_frame("text") == "text"
    assert first_frame(5) == 5
    with pytest.raises(ValueError, match="empty chunk"):
        first_frame([])


def test_split_chunk_zips_mapping_leaves_and_rejects_disagreeing_horizons() -> None:
    frames = split_chunk({"arm": np.arange(6).reshape(3, 2), "g": [0, 1, 2]})
    assert len(frames) == 3
    np.testing.assert_array_equal(frames[2]["arm"], [4, 5])
    assert frames[2]["g"] == 2
    with pytest.raises(ValueError, match="disagree on horizon"):
        split_chunk({"a": [1, 2], "b": [1, 2, 3]})
    assert split_chunk("abc") == ["abc"]
    assert split_chunk(7) == [7]


def test_numpy_bridge_fuses_and_splits_lanes_with_ragged_errors() -> None:
    b = get_bridge("numpy")
    stacked = b.tree_stack([{"x": np.zeros(2), "t": "a"}, {"x": np.ones(2), "t": "b"}])
    assert stacked["x"].shape == (2, 2)
    assert stacked["t"] == ["a", "b"]
    with pytest.raises(ValueError, match="ragged keys"):
        b.tree_stack([{"x": 1}, {"y": 1}])
    with pytest.raises(ValueError, match="None observation leaf"):
        b.tree_stack([None, None])
    with pytest.raises(ValueError, match="ragged"):
        b.tree_stack([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="leading batch axis n=3"):
        b.tree_unstack(np.zeros((2, 1)), 3)
    with pytest.raises(ValueError, match="cannot split a batched action leaf"):
        b.tree_unstack(object(), 2)


def test_plain_bridge_decodes_arrays_to_tensors_and_scalars_to_python() -> None:
    from rlmesh import Tensor

    b = get_bridge("plain")
    out = b.decode({"a": np.arange(3, dtype=np.float32), "n": np.int64(4)})
    assert isinstance(out["a"], Tensor)
    assert out["n"] == 4 and type(out["n"]) is int
    np.testing.assert_array_equal(b.encode(out["a"]), [0, 1, 2])
