"""Per-episode predict context and predict_seed (MOD-18..21, DELTA-30, DELTA-33)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from rlmesh.models import predict_seed
from rlmesh.models._context import EpisodeStore

I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)


@given(I64, U64)
def test_predict_seed_is_deterministic_and_a_u32(seed: int, index: int) -> None:
    value = predict_seed(seed, index)
    assert value == predict_seed(seed, index)
    assert 0 <= value < 2**32


def test_predict_seed_varies_with_the_seed_and_the_index() -> None:
    values = {predict_seed(s, i) for s in range(20) for i in range(20)}
    assert len(values) == 400


def test_predict_seed_domain_errors_follow_the_release() -> None:
    # DELTA-33 / Appendix B: overflow and type rules
    with pytest.raises(OverflowError):
        predict_seed(2**64 - 1, 0)
    with pytest.raises(OverflowError):
        predict_seed(0, -1)
    with pytest.raises(TypeError):
        predict_seed(1.0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        predict_seed("1", 0)  # type: ignore[arg-type]
    assert predict_seed(True, 0) == predict_seed(1, 0)
    assert predict_seed(-(2**63), 2**64 - 1) >= 0


def test_store_counts_predicts_per_episode_and_derives_predict_seeds() -> None:
    store = EpisodeStore()
    store.begin("e", 7)
    a, b = store.next("e"), store.next("e")
    assert (a["predict_index"], b["predict_index"]) == (0, 1)
    assert a["predict_seed"] == predict_seed(7, 0)
    assert b["predict_seed"] == predict_seed(7, 1)
    assert a["state"] is b["state"]
    assert a["episode_seed"] == 7


def test_unseeded_episode_has_no_predict_seed_and_seed_zero_is_kept() -> None:
    store = EpisodeStore()
    store.begin("u", None)
    store.begin("z", 0)
    assert store.next("u")["predict_seed"] is None
    assert store.next("z")["episode_seed"] == 0


def test_anonymous_episode_gets_a_fresh_unstored_context() -> None:
    store = EpisodeStore()
    ctx = store.next("")
    assert ctx == {
        "episode_id": "",
        "episode_seed": None,
        "predict_index": 0,
        "predict_seed": None,
        "state": {},
    }
    assert len(store) == 0


def test_store_is_bounded_and_refuses_a_new_episode_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLMESH_EPISODE_CAPACITY", "2")
    store = EpisodeStore()
    store.begin("a", None)
    store.begin("b", None)
    store.begin("a", 1)  # an existing episode is never refused
    with pytest.raises(RuntimeError, match="RLMESH_EPISODE_CAPACITY"):
        store.begin("c", None)
    store.end("a")
    store.begin("c", None)
    assert len(store) == 2
