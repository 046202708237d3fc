"""describe / describe_json and the canonical describe.v1 envelope (AUTH-12..21, DELTA-53)."""

from __future__ import annotations

import json
import math
from typing import Any

import authoring_targets
import pytest
from authoring_targets import DuckPolicy, TinyEnv, TinyFactory
from hypothesis import given, strategies as st

from rlmesh.authoring import (
    DESCRIBE_METADATA_KEY,
    DESCRIBE_SCHEMA_VERSION,
    EnvFactory,
    Variant,
    _describe as describe_module,
    describe,
    describe_json,
)
from rlmesh.authoring._canonical import build_envelope, validate_generated_at
from rlmesh.params import Param, ParamSpec

#: The pinned canonical bytes for TinyFactory (AUTH-20): key order, sorting and formatting.
TINY_EXPECTED = (
    '{"schema_version":1,"kind":"env","generated_at":"2026-06-01T12:00:00Z",'
    '"target":{"entrypoint":"authoring_targets:TinyFactory","qualname":"authoring_targets:TinyFactory"},'
    '"env_spec":{"action_space":{"details":{"n":3,"start":0},"dtype":"int64","kind":"discrete","shape":[]},'
    '"observation_space":{"details":{"bounds_kind":"uniform","high":1.0,"low":-1.0},"dtype":"float32",'
    '"kind":"box","shape":[2]}},'
    '"env_tags":null,'
    '"params":{"param_spec":{"extra":"forbid","params":['
    '{"choices":[2,3],"default":2,"description":"observation width","name":"size","required":false,"type":"int"},'
    '{"default":[0.0,0.0],"dim":2,"group":"task","name":"goal","required":false,"type":"vec2"}]},'
    '"signature_tier":[{"default":"tiny","name":"label","required":false,"type":"str"}]},'
    '"variants":{"catalog":[{"id":"small","metadata":{"name":"Small"},"params":{"size":2}},'
    '{"id":"large","metadata":{},"params":{"size":3}}]}}'
)

DUCK_EXPECTED = (
    '{"schema_version":1,"kind":"model",'
    '"target":{"entrypoint":"authoring_targets:DuckPolicy","qualname":"authoring_targets:DuckPolicy"},'
    '"model_spec":null,"corners":["predict","predict_chunk"],"native_chunk":4,'
    '"params":{"param_spec":null,"signature_tier":['
    '{"default":"default","name":"checkpoint","required":false,"type":"str"},'
    '{"default":1.0,"name":"temperature","required":false,"type":"float"}]}}'
)

FIXED_RUNTIME = {"component": "rlmesh-python", "language": "python", "language_version": "3.x"}


def test_constants_match_the_release() -> None:
    assert DESCRIBE_SCHEMA_VERSION == 1
    assert DESCRIBE_METADATA_KEY == "rlmesh.describe.v1"


# -- canonical bytes (AUTH-20) -----------------------------------------------------------------


def test_describe_json_of_a_factory_matches_the_pinned_bytes() -> None:
    got = describe_json(
        "authoring_targets:TinyFactory", generated_at="2026-06-01T12:00:00Z", include_runtime=False
    )
    assert got == TINY_EXPECTED


def test_describe_json_of_a_duck_model_class_matches_the_pinned_bytes() -> None:
    assert describe_json("authoring_targets:DuckPolicy", include_runtime=False) == DUCK_EXPECTED


def test_describe_json_is_byte_identical_across_runs() -> None:
    runs = {describe_json(TinyFactory, generated_at="2026-06-01T12:00:00Z") for _ in range(3)}
    assert len(runs) == 1


def test_runtime_comes_last_and_the_envelope_starts_with_schema_and_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(describe_module, "runtime_section", lambda **_: dict(FIXED_RUNTIME))
    got = describe_json("authoring_targets:TinyFactory", generated_at="2026-06-01T12:00:00Z")
    assert got.startswith('{"schema_version":1,"kind":"env",')
    assert (
        got
        == TINY_EXPECTED[:-1]
        + ',"runtime":{"component":"rlmesh-python","language":"python","language_version":"3.x"}}'
    )


def test_top_level_keys_follow_the_fixed_order_per_kind() -> None:
    env = json.loads(describe_json(TinyFactory, generated_at="2026-06-01T12:00:00Z"))
    assert list(env) == ["schema_version", "kind", "generated_at", "target", "env_spec", "env_tags",
                         "params", "variants", "runtime"]  # fmt: skip
    model = json.loads(describe_json(DuckPolicy))
    assert list(model) == ["schema_version", "kind", "target", "model_spec", "corners", "native_chunk",
                           "params", "runtime"]  # fmt: skip


def test_nested_keys_are_sorted_regardless_of_producer_order() -> None:
    def catalog(order: list[str]) -> Any:
        class F(TinyFactory):
            @classmethod
            def enumerate_variants(cls) -> list[Variant]:
                return [Variant("v", {"size": 2}, **{k: 1 for k in order})]

        F.__qualname__ = "F"
        return describe_json(F, include_runtime=False)

    a, b = catalog(["zeta", "alpha", "Mid"]), catalog(["Mid", "alpha", "zeta"])
    assert a == b and '"metadata":{"Mid":1,"alpha":1,"zeta":1}' in a


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-7, "1e-7"), (1e21, "1e21"), (100.0, "100.0"), (1e-5, "0.00001"), (1e16, "1e16"),
     (1e15, "1000000000000000.0"), (-0.0, "-0.0"), (0.1, "0.1"), (math.inf, "null"), (math.nan, "null"),
     (2**70, "1180591620717411303424")],
)  # fmt: skip
def test_numbers_use_the_shortest_round_trip_serde_style_and_non_finite_is_null(
    value: float, text: str
) -> None:
    out = build_envelope("env", {"params": {"x": value}})
    assert (
        out
        == '{"schema_version":1,"kind":"env","env_spec":null,"env_tags":null,"params":{"x":'
        + text
        + "}}"
    )


def test_non_ascii_is_written_raw_and_control_characters_escaped() -> None:
    out = build_envelope("model", {"params": {"name": "café ✓", "ctl": "a\nb\x01"}})
    assert '"name":"café ✓"' in out and '"ctl":"a\\nb\\u0001"' in out


def test_non_json_values_are_rendered_with_repr() -> None:
    class Thing:
        def __repr__(self) -> str:
            return "Thing()"

    out = json.loads(
        build_envelope("env", {"params": {"t": Thing(), "s": {1, 2} and (1, 2), 3: "k"}})
    )
    assert out["params"] == {"t": "Thing()", "s": [1, 2], "3": "k"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(json_values)
def test_canonical_json_round_trips_any_json_value(value: Any) -> None:
    out = build_envelope("env", {"params": value})
    assert json.loads(out)["params"] == value


@given(st.dictionaries(st.text(max_size=6), st.integers(), max_size=8), st.randoms())
def test_canonical_json_ignores_producer_key_order(d: dict[str, int], rnd: Any) -> None:
    items = list(d.items())
    rnd.shuffle(items)
    assert build_envelope("env", {"params": d}) == build_envelope("env", {"params": dict(items)})


# -- builder validation (AUTH-21) ---------------------------------------------------------------


def test_builder_rejects_unknown_kinds_and_pieces() -> None:
    with pytest.raises(ValueError, match="kind must be 'env' or 'model'"):
        build_envelope("policy", {})
    with pytest.raises(ValueError, match=r"got \['surprise'\]"):
        build_envelope("env", {"surprise": 1})
    with pytest.raises(ValueError, match=r"got \['model_spec'\]"):
        build_envelope("env", {"model_spec": None})
    with pytest.raises(ValueError, match=r"got \['env_spec', 'env_tags'\]"):
        build_envelope("model", {"env_spec": None, "env_tags": None})


def test_builder_rejects_pieces_over_4_MiB() -> None:
    with pytest.raises(ValueError, match="4 MiB"):
        build_envelope("env", {"params": "x" * (4 * 1024 * 1024 + 1)})


@pytest.mark.parametrize(
    "ts",
    ["2026-06-01T12:00:00Z", "2026-06-01T12:00:00.123456789Z", "2026-06-01T12:00:00+02:00",
     "2024-02-29T23:59:60-11:30"],
)  # fmt: skip
def test_generated_at_accepts_rfc3339(ts: str) -> None:
    assert validate_generated_at(ts) == ts
    assert (
        json.loads(describe_json(TinyFactory, generated_at=ts, include_runtime=False))[
            "generated_at"
        ]
        == ts
    )


@pytest.mark.parametrize(
    "ts",
    ["2026-06-01t12:00:00Z", "2026-06-01 12:00:00Z", "2026-06-01T12:00:00", "2026-13-01T12:00:00Z",
     "2025-02-29T12:00:00Z", "2026-06-01T24:00:00Z", "2026-06-01T12:00:00+25:00", "2026-06-01",
     "2026-06-01T12:00:00." + "1" * 60 + "Z", 20260601],
)  # fmt: skip
def test_generated_at_rejects_anything_else_mentioning_RFC_3339(ts: Any) -> None:
    with pytest.raises(ValueError, match="RFC-3339"):
        describe_json(TinyFactory, generated_at=ts)


# -- targets and kinds (AUTH-12) ----------------------------------------------------------------


def test_describe_is_the_parsed_canonical_string() -> None:
    assert describe(TinyFactory, include_runtime=False) == json.loads(
        describe_json(TinyFactory, include_runtime=False)
    )


def test_factory_class_and_instance_describe_the_same() -> None:
    a = describe_json(TinyFactory, include_runtime=False)
    b = describe_json(TinyFactory(), include_runtime=False)
    assert a == b and json.loads(a)["target"] == {
        "entrypoint": None,
        "qualname": "authoring_targets:TinyFactory",
    }


def test_EnvFactory_describe_classmethod_uses_kind_env() -> None:
    d = TinyFactory.describe()
    assert d["kind"] == "env" and d["target"]["qualname"] == "authoring_targets:TinyFactory"


def test_a_bare_callable_needs_kind() -> None:
    with pytest.raises(TypeError, match="kind="):
        describe(authoring_targets.make_tiny)
    env = describe(authoring_targets.make_tiny, kind="env", include_runtime=False)
    assert env["env_spec"]["observation_space"]["shape"] == [2]
    assert env["params"]["signature_tier"] == [
        {"name": "size", "type": "int", "default": 2, "required": False}
    ]
    model = describe(authoring_targets.predict_zero, kind="model", include_runtime=False)
    assert model["corners"] == ["predict"] and model["model_spec"] is None


def test_an_explicit_kind_must_be_env_or_model() -> None:
    with pytest.raises(ValueError, match="kind must be 'env' or 'model'"):
        describe(TinyFactory, kind="factory")


def test_an_object_that_is_neither_is_a_TypeError() -> None:
    with pytest.raises(TypeError, match="neither an EnvFactory"):
        describe(42)


def test_entrypoint_strings_resolve_nested_attributes_and_are_recorded() -> None:
    d = describe("authoring_targets:Outer.Inner", include_runtime=False)
    assert d["target"] == {
        "entrypoint": "authoring_targets:Outer.Inner",
        "qualname": "authoring_targets:Outer.Inner",
    }


@pytest.mark.parametrize(("target", "exc"), [("authoring_targets", ValueError), (":X", ValueError),
                                             ("authoring_targets:", ValueError),
                                             ("authoring_targets:Nope", ImportError),
                                             ("no_such_module_xyz:X", ImportError)])  # fmt: skip
def test_bad_entrypoint_strings_fail_clearly(target: str, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        describe(target)


# -- env gathering (AUTH-13, AUTH-14, AUTH-18) -----------------------------------------------------


def test_the_representative_env_is_built_once_and_closed() -> None:
    authoring_targets.BUILT.clear()
    describe(TinyFactory)
    assert len(authoring_targets.BUILT) == 1 and authoring_targets.BUILT[0].closed == 1


def test_a_served_env_is_read_but_neither_rebuilt_nor_closed() -> None:
    authoring_targets.BUILT.clear()
    env = TinyEnv(5)
    d = json.loads(describe_json(TinyFactory, served_env=[env, TinyEnv(1)], include_runtime=False))
    assert d["env_spec"]["observation_space"]["shape"] == [5]
    assert authoring_targets.BUILT == [] and env.closed == 0


def test_build_env_false_never_calls_make() -> None:
    authoring_targets.BUILT.clear()
    d = describe(TinyFactory, build_env=False, include_runtime=False)
    assert d["env_spec"]["error_type"] == "NotBuilt" and authoring_targets.BUILT == []
    assert d["params"]["param_spec"] is not None


def test_a_failing_make_becomes_an_error_badge_and_the_envelope_is_still_produced() -> None:
    class Broken(EnvFactory):
        def make(self) -> Any:
            raise RuntimeError("no GPU here")

    d = describe(Broken)
    assert d["env_spec"] == {"error": "no GPU here", "error_type": "RuntimeError"}
    assert d["env_tags"] is None and "runtime" in d


def test_a_failing_constructor_becomes_an_error_badge() -> None:
    class NeedsArgs(EnvFactory):
        def __init__(self, path: str) -> None:
            self.path = path

        def make(self) -> Any:
            return TinyEnv()

    assert describe(NeedsArgs)["env_spec"]["error_type"] == "TypeError"


def test_required_params_fall_back_to_the_first_catalog_variant() -> None:
    class Catalogued(EnvFactory):
        params = ParamSpec(Param("size", int, choices=(4, 6)))

        @classmethod
        def enumerate_variants(cls) -> list[Variant]:
            return [Variant("four", {"size": 4}), Variant("six", {"size": 6})]

        def make(self, size: int) -> Any:
            return TinyEnv(size)

    d = describe(Catalogued, include_runtime=False)
    assert d["env_spec"]["observation_space"]["shape"] == [4]
    assert d["params"]["param_spec"]["params"][0]["required"] is True
    assert "default" not in d["params"]["param_spec"]["params"][0]


def test_a_vector_env_publishes_single_spaces_and_num_envs() -> None:
    gym = pytest.importorskip("gymnasium")
    d = describe(
        lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2), kind="env"
    )
    spec = d["env_spec"]
    assert spec["num_envs"] == 2 and spec["observation_space"]["shape"] == [4]
    assert spec["action_space"]["kind"] == "discrete"


def test_gymnasium_spaces_are_converted_and_infinite_bounds_written_null() -> None:
    gym = pytest.importorskip("gymnasium")
    d = describe(lambda: gym.make("CartPole-v1"), kind="env")
    high = d["env_spec"]["observation_space"]["details"]["high"]
    assert high[1] is None and high[3] is None and high[0] == pytest.approx(4.8)


def test_env_tags_come_from_the_built_env_metadata_for_a_bare_callable() -> None:
    def make() -> TinyEnv:
        env = TinyEnv()
        env.metadata["rlmesh.adapters.v1.env_tags"] = {"observation": None}
        return env

    assert describe(make, kind="env")["env_tags"] == {"observation": None}


def test_factory_tags_are_published_and_a_broken_tags_object_is_a_badge() -> None:
    class Weird(EnvFactory):
        def make(self) -> Any:
            return TinyEnv()

    class BadTags:
        def to_dict(self) -> Any:
            raise ValueError("cannot serialize")

    Weird.tags = BadTags()  # type: ignore[assignment]
    assert describe(Weird, build_env=False)["env_tags"] == {"error": "cannot serialize"}


# -- variants (AUTH-17, DECISION-4) --------------------------------------------------------------


def test_the_variants_key_is_omitted_without_enumerate_hooks() -> None:
    assert "variants" not in describe(authoring_targets.make_tiny, kind="env")

    class Plain(EnvFactory):
        def make(self) -> Any:
            return TinyEnv()

    assert "variants" not in describe(Plain)


def test_variations_list_axes_and_a_bare_string_is_one_value() -> None:
    class Sweep(TinyFactory):
        @classmethod
        def enumerate_params(cls) -> dict[Any, Any]:
            return {"size": [2, 3], "label": "solo", 7: (1, 2)}

    v = describe(Sweep, include_runtime=False)["variants"]
    assert v["variations"] == {"size": [2, 3], "label": ["solo"], "7": [1, 2]}
    assert [c["id"] for c in v["catalog"]] == ["small", "large"]


def test_enumerate_params_not_returning_a_mapping_is_a_variations_error() -> None:
    class Bad(TinyFactory):
        @classmethod
        def enumerate_params(cls) -> Any:
            return [("size", [2])]

    assert "mapping" in describe(Bad)["variants"]["variations_error"]


def test_a_duplicate_id_is_a_catalog_error_for_the_whole_catalog() -> None:
    class Dup(TinyFactory):
        @classmethod
        def enumerate_variants(cls) -> list[Variant]:
            return [Variant("a", {}), Variant("a", {})]

    v = describe(Dup)["variants"]
    assert "catalog" not in v and "duplicate variant id 'a'" in v["catalog_error"]


def test_an_invalid_catalog_entry_gets_an_error_and_keeps_its_params_verbatim() -> None:
    class Lint(TinyFactory):
        @classmethod
        def enumerate_variants(cls) -> Any:
            yield Variant("ok", {"size": 3})
            yield {"id": "bad", "params": {"size": 9, "goal": (1, 2)}, "name": "Bad"}

    ok, bad = describe(Lint)["variants"]["catalog"]
    assert "error" not in ok and ok["params"] == {"size": 3}  # defaults not filled in
    assert bad["params"] == {"size": 9, "goal": [1, 2]} and bad["metadata"] == {"name": "Bad"}
    assert "size: 9 not in choices" in bad["error"]


# -- models (AUTH-13, AUTH-15) --------------------------------------------------------------------


def test_a_model_class_is_reflected_never_constructed() -> None:
    d = describe(DuckPolicy)  # DuckPolicy.__init__ and load raise if called
    assert d["kind"] == "model" and d["corners"] == ["predict", "predict_chunk"]


def test_model_spec_prefers_a_serializable_spec_and_badges_failures() -> None:
    class Spec:
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def to_dict(self) -> Any:
            if self.fail:
                raise ValueError("a Custom leaf cannot be serialized")
            return {"input": {}, "output": {}}

    class Good(DuckPolicy):
        spec = Spec(False)

    class Bad(DuckPolicy):
        spec = Spec(True)

    class Odd(DuckPolicy):
        spec = 3

    assert describe(Good)["model_spec"] == {"input": {}, "output": {}}
    assert describe(Bad)["model_spec"] == {"error": "a Custom leaf cannot be serialized"}
    assert "must be a ModelSpec" in describe(Odd)["model_spec"]["error"]


def test_model_corners_are_only_the_authored_ones_in_canonical_order() -> None:
    class BatchOnly:
        def predict_chunk_batch(self, obs: Any, horizon: int) -> Any: ...

        def predict(self, obs: Any) -> Any: ...

    assert describe(BatchOnly, kind="model")["corners"] == ["predict", "predict_chunk_batch"]


def test_rlmesh_Model_subclasses_and_wrapped_callables_report_authored_corners() -> None:
    models = pytest.importorskip("rlmesh.models")
    Model = getattr(models, "Model", None)
    if Model is None:
        pytest.skip("rlmesh.models.Model is not available yet")

    class ChunkOnly(Model):  # type: ignore[misc, valid-type]
        def predict_chunk(self, observation: Any, execution_horizon: int = 1) -> Any:
            return [0] * execution_horizon

    assert describe(ChunkOnly)["corners"] == ["predict_chunk"]
    wrapped = Model(lambda obs: 0)
    assert describe(wrapped)["corners"] == ["predict"]


# -- runtime (AUTH-19, DELTA-53) ----------------------------------------------------------------


def test_runtime_section_has_the_documented_keys() -> None:
    rt = describe(TinyFactory)["runtime"]
    for key in ("component", "language", "language_version", "package_version", "os", "os_version", "arch",
                "framework_versions", "protocol_generation", "supported_workflow_editions",
                "preferred_workflow_edition"):  # fmt: skip
        assert key in rt
    assert rt["component"] == "rlmesh-python" and rt["language"] == "python"
    assert rt["supported_workflow_editions"] == ["2026.06"] and "numpy" in rt["framework_versions"]


def test_runtime_reports_a_declared_edition_or_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_WORKFLOW_EDITION", raising=False)

    class Pinned(TinyFactory):
        workflow_edition = "2026.06-0.1.0"

    assert describe(Pinned)["runtime"]["preferred_workflow_edition"] == "2026.06-0.1.0"
    served = json.loads(describe_json(Pinned, workflow_edition=""))["runtime"]
    assert served["preferred_workflow_edition"] == "2026.06"


def test_an_undrivable_class_edition_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLMESH_WORKFLOW_EDITION", raising=False)

    class Future(TinyFactory):
        workflow_edition = "2099.01"

    rt = describe(Future)["runtime"]
    assert 'cannot drive workflow edition "2099.01"' in rt["workflow_edition_error"]
    assert rt["preferred_workflow_edition"] == "2026.06"
