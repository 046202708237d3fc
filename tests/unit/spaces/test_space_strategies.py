"""Property tests over drawn specs and values (the shared strategies in tests/strategies.py)."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from rlmesh._dtypes import np_dtype
from rlmesh.spaces import SpaceSpec, space_from_spec
from rlmesh.spaces._values import check_value, compile_encoder, compile_range_check
from strategies import space_specs, values_for

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _canonical(spec: SpaceSpec, value, lanes) -> None:
    """Assert ``value`` has exactly the canonical layout of ``spec``."""
    kind = spec.kind
    if kind in ("box", "multi_binary", "multi_discrete") or (kind == "discrete" and lanes):
        shape = tuple(spec.shape) if lanes is None else (lanes, *spec.shape)
        assert type(value) is np.ndarray and value.shape == shape
        assert value.dtype == np_dtype(spec.dtype) and value.flags.c_contiguous
    elif kind == "discrete":
        assert type(value) is int
    elif kind == "text":
        assert type(value) is str if lanes is None else all(type(s) is str for s in value)
    elif kind == "dict":
        assert type(value) is dict and list(value) == [k for k, _ in spec._children()]
        for k, child in spec._children():
            _canonical(child, value[k], lanes)
    else:
        assert type(value) is tuple and len(value) == len(spec._children())
        for (_, child), v in zip(spec._children(), value, strict=True):
            _canonical(child, v, lanes)


@FAST
@given(space_specs())
def test_spec_dict_and_pickle_round_trips(spec: SpaceSpec) -> None:  # SPC-3
    assert SpaceSpec._from_dict(spec._to_dict()) == spec
    assert SpaceSpec._from_dict(spec._to_dict())._to_dict() == spec._to_dict()
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert repr(space_from_spec(spec)) == repr(spec)


@FAST
@given(st.data())
def test_drawn_values_are_canonical_conforming_and_encoder_fixed_points(data) -> None:
    spec = data.draw(space_specs(), label="spec")
    lanes = data.draw(st.sampled_from([None, 1, 3]), label="lanes")
    value = data.draw(values_for(spec, lanes), label="value")
    _canonical(spec, value, lanes)
    out = compile_encoder(spec, lanes=lanes)(value)
    _canonical(spec, out, lanes)
    check = compile_range_check(spec, lanes=lanes)
    assert check is None or check(out) == []
    check_value(spec, value, lanes=lanes)


@FAST
@given(space_specs(), st.integers(0, 2**32))
def test_samples_of_drawn_specs_are_canonical_and_contained(
    spec: SpaceSpec, seed: int
) -> None:  # SMP
    space = space_from_spec(spec, bridge="numpy")
    space.seed(seed)
    value = space.sample()
    _canonical(spec, value, None)
    assert space.contains(value)
    again = space_from_spec(spec, bridge="numpy")
    again.seed(seed)
    assert repr(again.sample()) == repr(value)


@FAST
@given(st.data())
def test_per_lane_values_batch_like_one_fused_value(data) -> None:  # VAL-15
    spec = data.draw(space_specs(), label="spec")
    lanes = [data.draw(values_for(spec)) for _ in range(2)]
    fused = compile_encoder(spec, lanes=2)(lanes)
    _canonical(spec, fused, 2)
    assert repr(compile_encoder(spec, lanes=2)(fused)) == repr(fused)
