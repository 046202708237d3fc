"""The step path's one-call checks give the same answers as the full ones (issue 40).

``Checks.observe`` / ``Checks.action_in`` are what a server's driver calls every step: one
call for the common case, the full :meth:`Checks.observation` / :meth:`Checks.action` for
the rest. Under ``warn`` a root Box's range is decided once per session: after its one
warning, later deviations would change nothing, so they go unchecked -- but a NaN is a
structural error and is refused on every step, and a new session checks again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlmesh._envkit.checks import Checks
from rlmesh.errors import EnvironmentException, InvalidAction
from rlmesh.spaces import Box, Dict, Discrete
from rlmesh.spaces._quick import SMALL, compile_quick_box

F32 = np.float32


def _step_observation(checks: Checks, obs: Any) -> Any:
    """What the served driver does with a step's observation."""
    try:
        canonical = checks.observe(obs)
    except Exception:
        canonical = None
    return checks.observation(obs, "step") if canonical is None else canonical


def _warnings(checks: Checks) -> list[dict[str, str]]:
    out = list(checks.pending)
    checks.pending.clear()
    return out


def _checks(policy: str, obs: Any = None, act: Any = None) -> Checks:
    obs = obs or Box(np.array([-1.0, -np.inf]), np.array([1.0, np.inf]), (2,), "float32")
    act = act or Box(-1.0, 1.0, (2,), "float32")
    checks = Checks(obs.spec, act.spec, None, policy)
    checks.begin_session()
    return checks


def test_a_conforming_observation_is_returned_as_it_is() -> None:
    checks = _checks("warn")
    obs = np.array([0.5, 1e30], dtype=F32)
    assert checks.observe(obs) is obs
    assert _step_observation(checks, obs) is obs
    assert _warnings(checks) == []


@pytest.mark.parametrize("policy", ["warn", "strict", "off"])
def test_a_nan_is_refused_on_every_step_even_after_a_range_warning(policy: str) -> None:
    checks = _checks(policy)
    if policy == "warn":  # the range is decided for this session ...
        _step_observation(checks, np.array([2.0, 0.0], dtype=F32))
        assert [w["path"] for w in _warnings(checks)] == ["$"]
    for _ in range(2):  # ... a NaN still is not
        with pytest.raises(EnvironmentException, match="NaN"):
            _step_observation(checks, np.array([0.0, np.nan], dtype=F32))


def test_under_warn_a_root_box_warns_once_per_session_and_again_in_the_next() -> None:
    checks = _checks("warn")
    out = np.array([2.0, 0.0], dtype=F32)
    assert _step_observation(checks, out) is out
    assert len(_warnings(checks)) == 1
    for value in (3.0, -5.0, 0.5):  # the same path: no second warning, the value goes through
        obs = np.array([value, 0.0], dtype=F32)
        assert _step_observation(checks, obs) is obs
    assert _warnings(checks) == []
    checks.begin_session()
    _step_observation(checks, out)
    assert len(_warnings(checks)) == 1


def test_under_strict_every_out_of_range_observation_is_fatal() -> None:
    checks = _checks("strict")
    for _ in range(2):
        with pytest.raises(EnvironmentException, match="out of range"):
            _step_observation(checks, np.array([2.0, 0.0], dtype=F32))
    assert _step_observation(checks, np.array([0.5, 0.0], dtype=F32)) is not None


def test_actions_strict_refuses_every_time_warn_warns_once_and_nan_never_passes() -> None:
    strict = _checks("strict")
    for _ in range(2):
        with pytest.raises(InvalidAction):
            strict.action_in(np.array([2.0, 0.0], dtype=F32))
    warn = _checks("warn")
    assert warn.action_in(np.array([2.0, 0.0], dtype=F32)) is not None
    assert len(_warnings(warn)) == 1
    assert warn.action_in(np.array([-3.0, 0.0], dtype=F32)) is not None
    assert _warnings(warn) == []
    with pytest.raises(ValueError, match="NaN"):
        warn.action_in(np.array([np.nan, 0.0], dtype=F32))


def test_other_values_are_coerced_or_refused_as_the_full_check_does() -> None:
    checks = _checks("warn")
    coerced = checks.action_in([0.5, -0.5])  # a list: the encoder coerces it
    assert coerced.dtype == F32 and coerced.tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match="shape"):
        checks.action_in(np.zeros(3, dtype=F32))
    wide = np.array([0.5, 0.0])  # float64 for a float32 Box: coerced, not refused
    assert _step_observation(checks, wide).dtype == F32


def test_a_dict_observation_is_checked_in_full() -> None:
    space = Dict({"pos": Box(-1.0, 1.0, (2,)), "mode": Discrete(3)})
    checks = _checks("warn", obs=space)
    obs = {"pos": np.array([0.5, 2.0], dtype=F32), "mode": 1}
    _step_observation(checks, obs)
    assert [w["path"] for w in _warnings(checks)] == ["$.pos"]
    _step_observation(checks, obs)
    assert _warnings(checks) == []  # warned once per path, as before


@pytest.mark.parametrize("size", [1, SMALL, SMALL + 1, 64])
def test_the_one_pass_check_agrees_with_bounds_in_the_box_dtype(size: int) -> None:
    # Box(-1.1, 1.1) stores its bounds as float32: float32(-1.1) is inside (CNF-3)
    check = compile_quick_box(Box(-1.1, 1.1, (size,)).spec)
    assert check is not None
    inside = np.full(size, -1.1, dtype=F32)
    assert check(inside) is inside
    outside = inside.copy()
    outside[-1] = np.nextafter(F32(1.1), F32(2.0))
    assert check(outside) is None
    batch = compile_quick_box(Box(-1.0, 1.0, (size,)).spec, lanes=3)
    assert batch is not None and batch(np.zeros((3, size), dtype=F32)) is not None


def test_the_one_pass_check_is_for_float_boxes_only() -> None:
    assert compile_quick_box(Discrete(3).spec) is None
    assert compile_quick_box(Box(0, 255, (4,), "uint8").spec) is None


_SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e-30]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("low", "high"),
    [
        ([-4.8, -np.inf, -0.42, -np.inf], [4.8, np.inf, 0.42, np.inf]),  # CartPole's: both sides
        ([0.0, -np.inf, 0.0, -1.0], [np.inf, np.inf, np.inf, np.inf]),  # a lower bound only
        ([-np.inf] * 4, [0.0, 1.0, np.inf, -0.0]),  # an upper bound only
    ],
)
@pytest.mark.parametrize("lanes", [None, 16, 2048])  # one-pass, clamp, and comparisons
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_batch_check_passes_exactly_the_values_within_bounds_and_free_of_nan(
    dtype: str, low: list[float], high: list[float], lanes: int | None, data: Any
) -> None:
    # the compiled check only ever says "fine as it is" (returns the value itself); a value
    # it passes must be NaN-free and within the Box's bounds in its own dtype (CNF-2/3),
    # and a conforming value must pass unless it is a signed zero at a zero bound
    box = Box(np.array(low), np.array(high), (4,), dtype)
    check = compile_quick_box(box.spec, lanes, otherwise=lambda v: None)
    assert check is not None
    shape = (4,) if lanes is None else (lanes, 4)
    base = np.zeros(shape, dtype=dtype)
    picks = data.draw(
        st.lists(
            st.tuples(
                st.integers(0, base.size - 1),
                st.one_of(st.sampled_from(_SPECIALS), st.floats(-10, 10, width=32)),
            ),
            max_size=6,
        )
    )
    flat = base.reshape(-1)
    for at, x in picks:
        flat[at] = x
    lo, hi = (np.broadcast_to(np.asarray(b, dtype=dtype), shape) for b in (box.low, box.high))
    conforming = not np.isnan(base).any() and bool(((lo <= base) & (base <= hi)).all())
    passed = check(base) is base
    if passed:
        assert conforming
    elif conforming:  # the clamp may send a signed zero at a zero bound to the full path
        assert np.any((base == 0) & ((lo == 0) | (hi == 0)))
