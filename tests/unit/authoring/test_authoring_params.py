"""Param / ParamSpec / Vector and the binding resolver (AUTH-6..10, DELTA-58)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
from hypothesis import given, strategies as st

import rlmesh.params as params_module
from rlmesh.authoring import binding_metadata, resolve_params
from rlmesh.errors import RLMeshException
from rlmesh.params import (
    PARAM_METADATA_KEY,
    MissingParamError,
    Param,
    ParamError,
    ParamSpec,
    UnknownParamError,
    Vector,
)

# -- the public module ----------------------------------------------------------------------


def test_rlmesh_params_exports_exactly_the_seven_names_of_A8() -> None:
    assert sorted(params_module.__all__) == sorted(
        ["MissingParamError", "PARAM_METADATA_KEY", "Param", "ParamError", "ParamSpec",
         "UnknownParamError", "Vector"]
    )  # fmt: skip
    assert PARAM_METADATA_KEY == "rlmesh.params.v1.binding"


def test_param_errors_are_ValueErrors_and_RLMeshExceptions() -> None:
    for cls in (ParamError, MissingParamError, UnknownParamError):
        assert issubclass(cls, ValueError) and issubclass(cls, RLMeshException)
    assert issubclass(MissingParamError, ParamError) and issubclass(UnknownParamError, ParamError)


# -- Vector (AUTH-8) -----------------------------------------------------------------------------


def test_Vector_dim_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="dim must be >= 1"):
        Vector(0)
    with pytest.raises(TypeError, match="dim must be an int"):
        Vector(True)  # type: ignore[arg-type]


def test_Vector_coerces_lists_and_tuples_to_a_tuple_of_floats() -> None:
    assert Vector(3).coerce([1, 2, 3.5]) == (1.0, 2.0, 3.5)
    assert Vector(1).coerce((7,)) == (7.0,)
    assert isinstance(Vector(2).coerce([1, 2]), tuple)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([1.0, 2.0], "expected 3 components, got 2"),
        ([1.0, True, 3.0], "component 1 must be a number, got bool"),
        ([1.0, "x", 3.0], "component 1 must be a number, got str"),
        ([1.0, math.nan, 3.0], "component 1 must be finite"),
        ([1.0, math.inf, 3.0], "component 1 must be finite"),
        ("abc", "expected a list or tuple of 3 floats"),
        (5, "expected a list or tuple of 3 floats"),
    ],
)
def test_Vector_rejects_bad_values_with_the_reason(value: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Vector(3).coerce(value)


def test_unit_Vector_requires_unit_norm_within_1e_3() -> None:
    v = Vector(4, unit=True)
    assert v.coerce([0, 0, 0, 1]) == (0.0, 0.0, 0.0, 1.0)
    assert v.coerce([0, 0, 0, 1.0009]) == (0.0, 0.0, 0.0, 1.0009)
    with pytest.raises(ValueError, match="unit-norm"):
        v.coerce([0, 0, 0, 1.002])


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=8))
def test_Vector_coercion_round_trips_any_finite_list(xs: list[float]) -> None:
    out = Vector(len(xs)).coerce(xs)
    assert out == tuple(xs)
    assert Vector(len(xs)).coerce(list(out)) == out


# -- Param (AUTH-6) -------------------------------------------------------------------------------


def test_Param_defaults_match_the_seed_signature() -> None:
    p = Param("name")
    assert (p.type, p.choices, p.description, p.group) == ("str", None, "", None)
    assert p.type_name == "str"


@pytest.mark.parametrize(
    ("type_", "name"),
    [(int, "int"), (float, "float"), (str, "str"), (bool, "bool"), ("int", "int"),
     ("custom_thing", "custom_thing"), (Vector(3), "vec3")],
)  # fmt: skip
def test_Param_type_accepts_python_types_names_vectors_and_opaque_strings(
    type_: Any, name: str
) -> None:
    assert Param("x", type_).type_name == name


def test_Param_is_frozen() -> None:
    p = Param("x", int)
    with pytest.raises(AttributeError):
        p.name = "y"  # type: ignore[misc]


def test_Param_enum_needs_choices() -> None:
    with pytest.raises(ValueError, match="type 'enum' needs choices"):
        Param("mode", "enum")


def test_Param_rejects_an_unsupported_python_class_with_a_fix() -> None:
    with pytest.raises(TypeError, match="Pass its name as a string"):
        Param("path", list)


def test_Param_rejects_a_non_identifier_name() -> None:
    with pytest.raises(ValueError, match="identifier"):
        Param("not a name")


def test_Param_choices_are_coerced_to_the_type_at_construction() -> None:
    assert Param("n", int, choices=[1, 2.0]).choices == (1, 2)
    assert Param("g", Vector(2), choices=([0, 1], (1, 0))).choices == ((0.0, 1.0), (1.0, 0.0))
    with pytest.raises(ValueError, match="choice 'a' is invalid"):
        Param("n", int, choices=(1, "a"))


@pytest.mark.parametrize(
    ("type_", "value", "out"),
    [("int", 3, 3), ("int", 3.0, 3), ("float", 2, 2.0), ("float", 2.5, 2.5), ("bool", True, True),
     ("str", "a", "a"), ("enum", "x", "x"), ("opaque", object, object)],
)  # fmt: skip
def test_Param_coerce_accepts_per_type_rules(type_: str, value: Any, out: Any) -> None:
    choices = ("x",) if type_ == "enum" else None
    got = Param("p", type_, choices=choices).coerce(value)
    assert got == out and type(got) is type(out)


@pytest.mark.parametrize(
    ("type_", "value", "match"),
    [("int", True, "expected int, got bool"), ("int", 2.5, "non-integral float"),
     ("int", "3", "expected int, got str"), ("float", True, "expected float, got bool"),
     ("float", math.inf, "finite"), ("float", math.nan, "finite"), ("bool", 1, "expected bool, got int"),
     ("str", 3, "expected str, got int")],
)  # fmt: skip
def test_Param_coerce_rejects_wrong_types_naming_the_parameter(
    type_: str, value: Any, match: str
) -> None:
    with pytest.raises(ParamError, match=f"^p: .*{match}"):
        Param("p", type_).coerce(value)


def test_Param_choices_treat_bool_and_int_as_different() -> None:
    p = Param("flag", "enum", choices=(1, 2))
    with pytest.raises(ParamError, match=r"flag: True not in choices \[1, 2\]"):
        p.coerce(True)
    assert Param("b", bool, choices=(True,)).coerce(True) is True
    with pytest.raises(ParamError, match="not in choices"):
        Param("n", int, choices=(0, 1)).coerce(2)


def test_Param_vector_choices_match_lists_against_tuples() -> None:
    p = Param("goal", Vector(2), choices=((0, 0), (1, 1)))
    assert p.coerce([1, 1]) == (1.0, 1.0)
    with pytest.raises(ParamError, match="not in choices"):
        p.coerce([1, 0])


# -- ParamSpec (AUTH-7) -----------------------------------------------------------------------


def test_ParamSpec_rejects_a_parameter_declared_twice() -> None:
    with pytest.raises(ValueError, match="declares parameter 'x' more than once"):
        ParamSpec(Param("x"), Param("y"), Param("x", int))


def test_ParamSpec_rejects_unknown_extra_and_non_Param_entries() -> None:
    with pytest.raises(ValueError, match="extra must be 'forbid' or 'passthrough'"):
        ParamSpec(extra="allow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ParamSpec takes Param"):
        ParamSpec("x")  # type: ignore[arg-type]


def test_ParamSpec_is_immutable_and_has_value_equality() -> None:
    a = ParamSpec(Param("x", int), extra="passthrough")
    assert a == ParamSpec(Param("x", int), extra="passthrough")
    assert a != ParamSpec(Param("x", int))
    assert a.names == ("x",) and "x" in a and len(a) == 1 and a.get("y") is None
    with pytest.raises(AttributeError, match="immutable"):
        a.extra = "forbid"  # type: ignore[misc]


# -- resolve (AUTH-9, DELTA-58) -----------------------------------------------------------------


def make(
    robots: int = 1, mode: str = "a", goal: tuple[float, float] = (0.0, 0.0), seed: int = 0
) -> None:
    """A target with only optional keyword parameters."""


def make_required(task: str, seed: int = 0) -> None:
    """A target with a required parameter."""


def make_kwargs(level: int = 0, **kwargs: Any) -> None:
    """A target that forwards extras."""


SPEC = ParamSpec(
    Param("robots", int, choices=(1, 2)),
    Param("mode", "enum", choices=("a", "b")),
    Param("goal", Vector(2)),
)


def test_resolve_without_a_spec_passes_kwargs_through_unchanged() -> None:
    assert resolve_params(None, make, {"anything": object}) == {"anything": object}


def test_resolve_coerces_declared_values_and_fills_no_defaults() -> None:
    out = resolve_params(SPEC, make, {"robots": 2.0, "goal": [1, 0]})
    assert out == {"robots": 2, "goal": (1.0, 0.0)}
    assert type(out["robots"]) is int


def test_resolve_type_checks_undeclared_signature_parameters_by_annotation() -> None:
    assert resolve_params(SPEC, make, {"seed": 3.0}) == {"seed": 3}
    with pytest.raises(ParamError, match=r"make\(\): seed: expected int, got str"):
        resolve_params(SPEC, make, {"seed": "3"})


def test_resolve_understands_stringized_annotations() -> None:
    def target(n: int = 0) -> None: ...

    target.__annotations__["n"] = "int"
    with pytest.raises(ParamError, match="expected int"):
        resolve_params(ParamSpec(), target, {"n": "x"})


def test_resolve_rejects_a_declared_value_outside_its_choices_naming_it() -> None:
    with pytest.raises(ParamError, match=r"robots: 3 not in choices \[1, 2\]"):
        resolve_params(SPEC, make, {"robots": 3})


def test_resolve_forbid_rejects_unknown_keys_sorted_with_the_fix() -> None:
    with pytest.raises(
        UnknownParamError, match="declare them in the ParamSpec or set extra='passthrough'"
    ) as ei:
        resolve_params(SPEC, make, {"robtos": 1, "alpha": 2})
    assert ei.value.names == ("alpha", "robtos")


def test_resolve_passthrough_forwards_unknown_keys_into_kwargs() -> None:
    spec = ParamSpec(Param("level", int), extra="passthrough")
    assert resolve_params(spec, make_kwargs, {"level": 1, "extra": "x"}) == {
        "level": 1,
        "extra": "x",
    }


def test_resolve_passthrough_without_var_kwargs_is_an_UnknownParamError() -> None:
    spec = ParamSpec(extra="passthrough")
    with pytest.raises(
        UnknownParamError, match="extra='passthrough' but make has no \\*\\*kwargs to forward: z"
    ):
        resolve_params(spec, make, {"z": 1})


def test_resolve_reports_a_missing_declared_required_parameter() -> None:
    spec = ParamSpec(Param("task", "enum", choices=("x", "y")))
    with pytest.raises(MissingParamError, match="missing required parameter: 'task'") as ei:
        resolve_params(spec, make_required, {})
    assert ei.value.name == "task"


def test_resolve_reports_a_missing_undeclared_required_parameter_DELTA_58() -> None:
    with pytest.raises(MissingParamError, match="missing required parameter: 'task'"):
        resolve_params(ParamSpec(), make_required, {"seed": 1})


def test_resolve_rejects_supplying_a_declared_param_the_target_cannot_take() -> None:
    spec = ParamSpec(Param("ghost", int))
    with pytest.raises(ParamError, match="cannot take declared parameter 'ghost'"):
        resolve_params(spec, make, {"ghost": 1})


def test_resolve_warns_when_a_declared_param_is_not_in_the_signature() -> None:
    with pytest.warns(UserWarning, match="declares 'ghost'"):
        resolve_params(ParamSpec(Param("ghost", int)), make, {})


def test_resolve_accepts_declared_params_through_var_kwargs() -> None:
    spec = ParamSpec(Param("ghost", int))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_params(spec, make_kwargs, {"ghost": 2.0}) == {"ghost": 2}


def test_resolve_accepts_anything_for_an_uninspectable_target_but_checks_declared_values() -> None:
    out = resolve_params(ParamSpec(Param("n", int)), _Opaque(), {"n": 1.0, "other": "x"})
    assert out == {"n": 1, "other": "x"}


class _Opaque:
    """A callable whose signature cannot be read."""

    @property
    def __signature__(self) -> Any:
        raise ValueError("no signature")

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...


# -- binding metadata (AUTH-10) ----------------------------------------------------------------


def test_binding_metadata_publishes_binding_spec_and_validated_flags() -> None:
    resolved = resolve_params(SPEC, make, {"robots": 2, "seed": 1})
    md = binding_metadata(SPEC, make, {**resolved, "odd": object()})
    body = md[PARAM_METADATA_KEY]
    assert body["binding"]["robots"] == 2 and body["binding"]["odd"].startswith("<object")
    assert body["validated"] == {"robots": True, "seed": True, "odd": False}
    assert body["param_spec"]["extra"] == "forbid"
    assert [p["name"] for p in body["param_spec"]["params"]] == ["robots", "mode", "goal"]


def test_ParamSpec_to_dict_takes_defaults_and_required_from_the_signature_AUTH_16() -> None:
    spec = ParamSpec(
        Param("task", "enum", choices=("x", "y"), description="which", group="g"),
        Param("seed", int),
        Param("q", Vector(4, unit=True)),
    )

    def target(task: str, seed: int = 7, q: Any = (0, 0, 0, 1)) -> None: ...

    assert spec.to_dict(target) == {
        "params": [
            {"name": "task", "type": "enum", "required": True, "choices": ["x", "y"],
             "description": "which", "group": "g"},
            {"name": "seed", "type": "int", "required": False, "default": 7},
            {"name": "q", "type": "vec4", "required": False, "dim": 4, "unit": True, "default": [0, 0, 0, 1]},
        ],
        "extra": "forbid",
    }  # fmt: skip


def test_a_param_spec_pickles_so_a_factory_with_params_reaches_pool_and_ray_workers() -> None:
    import pickle

    from rlmesh.authoring import Param, ParamSpec

    spec = ParamSpec(
        Param("difficulty", str, choices=["easy", "hard"]), Param("n", int), extra="passthrough"
    )
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.extra == "passthrough" and back.names == ("difficulty", "n")
    assert back.get("difficulty").choices == ("easy", "hard")
