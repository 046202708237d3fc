"""One value bridge per flavour: models and clients convert values by the same rules (issue 10 item 3).

BKD-1/BKD-2 (numpy scalars become Python scalars outside the numpy flavour), BKD-30/31 and
MOD-32 (one ``tree_stack``/``tree_unstack``), MOD-1 (the model flavour differs only in its
bridge).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import require
from rlmesh import Tensor
from rlmesh._bridge import NUMPY, PLAIN, resolve_bridge
from rlmesh.models._values import env_action, get_bridge
from rlmesh.spaces._values import compile_encoder
from strategies import space_specs, values_for


def _shape(x: Any) -> Any:
    """Type, dtype and content of a decoded tree, for comparing two decodes exactly."""
    if isinstance(x, dict):
        return ("dict", {k: _shape(v) for k, v in x.items()})
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, [_shape(v) for v in x])
    if isinstance(x, Tensor):
        return ("Tensor", x.dtype, tuple(x.shape), np.asarray(x).tolist())
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tolist())
    return (type(x).__name__, x)


@pytest.mark.parametrize("name", ["plain", "numpy"])
def test_a_model_flavour_converts_through_its_clients_bridge(name: str) -> None:  # MOD-1, BKD-30
    assert get_bridge(name).values is resolve_bridge(name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("plain", (float, 1.5)), ("numpy", (np.float32, 1.5))],
)
def test_numpy_scalars_decode_alike_for_models_and_clients(
    name: str, expected: tuple[type, float]
) -> None:
    """BKD-1/BKD-2: np.float32(1.5) is a Python float on the plain flavour, numpy's own on numpy."""
    for out in (
        get_bridge(name).decode(np.float32(1.5)),
        resolve_bridge(name).decode(np.float32(1.5)),
    ):
        assert type(out) is expected[0] and out == expected[1]


def test_read_only_mappings_and_tensors_decode_alike() -> None:  # BKD-1
    tree = types.MappingProxyType({"a": np.arange(3, dtype=np.float32), "n": np.int64(2)})
    for bridge in (PLAIN, get_bridge("plain")):
        out = bridge.decode(tree)
        assert type(out) is dict and isinstance(out["a"], Tensor) and type(out["n"]) is int
    t = Tensor._wrap(np.arange(2, dtype=np.int32))
    for bridge in (NUMPY, get_bridge("numpy")):
        out = bridge.decode({"t": t})["t"]
        assert isinstance(out, np.ndarray) and out.tolist() == [0, 1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_model_and_client_decode_every_space_kind_alike(data: Any) -> None:  # BKD-30, VAL-6
    spec = data.draw(space_specs())
    canonical = compile_encoder(spec)(data.draw(values_for(spec)))
    for name in ("plain", "numpy"):
        model_side = get_bridge(name).decode(canonical)
        client_side = resolve_bridge(name).compile_decoder(spec)(canonical)
        assert _shape(model_side) == _shape(client_side)


@pytest.mark.parametrize("name", ["numpy"])
def test_fusion_rules_are_the_value_bridges(name: str) -> None:  # MOD-32, BKD-31
    lanes = [{"x": np.zeros(2), "t": ("a", 1)}, {"x": np.ones(2), "t": ("b", 2)}]
    model, values = get_bridge(name), resolve_bridge(name)
    assert _shape(model.tree_stack(lanes)) == _shape(values.tree_stack(lanes))
    fused = values.tree_stack(lanes)
    assert _shape(model.tree_unstack(fused, 2)) == _shape(values.tree_unstack(fused, 2))
    for bridge in (model, values):
        with pytest.raises(ValueError, match="ragged keys across 2 lanes"):
            bridge.tree_stack([{"x": 1}, {"y": 1}])
        with pytest.raises(ValueError, match="leading batch axis n=3"):
            bridge.tree_unstack(np.zeros((2, 1)), 3)


def test_a_per_lane_list_and_a_fused_tuple_both_split() -> None:  # MOD-32
    assert NUMPY.tree_unstack([np.zeros(2), np.ones(2)], 2)[1].tolist() == [1.0, 1.0]
    assert NUMPY.tree_unstack((np.array([1, 2]), ["a", "b"]), 2) == [(1, "a"), (2, "b")]
    assert NUMPY.tree_unstack((3, 4), 2) == [3, 4]


def test_plain_actions_reach_the_env_as_host_arrays() -> None:  # MOD-1
    t = Tensor._wrap(np.arange(2, dtype=np.float32))
    out = env_action(PLAIN, {"a": t, "b": 3})
    assert isinstance(out["a"], np.ndarray) and out["b"] == 3


def test_torch_models_and_clients_share_the_torch_bridge() -> None:  # BKD-10/11, MOD-1
    torch = require("torch")
    model = get_bridge("torch")
    assert model.values is resolve_bridge("torch")
    out = model.decode({"x": np.float32(1.5), "a": np.arange(2, dtype=np.float32)})
    assert type(out["x"]) is float and isinstance(out["a"], torch.Tensor)
    assert type(resolve_bridge("torch").decode(np.float32(1.5))) is float


def test_jax_models_copy_env_arrays_but_clients_may_alias_fresh_buffers() -> None:  # BKD-20
    jax = require("jax")
    arr = np.arange(4096 * 4, dtype=np.float32)
    model_side = get_bridge("jax").decode(arr)
    arr[0] = 99.0  # the env writes into its own array after the step
    assert isinstance(model_side, jax.Array) and float(model_side[0]) == 0.0
    assert type(resolve_bridge("jax").decode(np.float32(1.5))) is float


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_local_route_and_a_served_route_hand_the_model_the_same_values(data: Any) -> None:
    """MOD-1, VAL-6: in-process input == what a ModelServer joins from the wire, for any space kind."""
    import rlmesh
    from rlmesh._plan import value_plan
    from rlmesh.models._route import LocalRoute
    from rlmesh.spaces import Discrete

    spec = data.draw(space_specs())
    value = data.draw(values_for(spec))
    plan = value_plan(spec)
    scalars, segments = plan.pack(value)
    wire = plan.join(
        scalars,
        [np.frombuffer(np.ascontiguousarray(s).tobytes(), np.uint8).copy() for s in segments],
    )
    contract = types.SimpleNamespace(
        observation_space=spec, action_space=Discrete(2).spec, num_envs=1
    )
    for flavour in (rlmesh.Model, rlmesh.numpy.Model):
        route = LocalRoute(
            flavour(lambda obs: 0), instruction=None, trust_entrypoints=None, execution_horizon=1
        )
        route.bind(types.SimpleNamespace(contract=contract))
        assert _shape(route.model_input(value)) == _shape(route.model_input(wire))


def test_a_local_route_hands_a_nonconforming_observation_over_as_the_env_returned_it() -> None:
    """Converting is the route's job, judging the env view's: a NaN or a wrong shape is not refused here."""
    import rlmesh
    from rlmesh.models._route import LocalRoute
    from rlmesh.spaces import Box, Discrete

    contract = types.SimpleNamespace(
        observation_space=Box(-1.0, 1.0, (2,)).spec, action_space=Discrete(2).spec, num_envs=1
    )
    route = LocalRoute(
        rlmesh.numpy.Model(lambda obs: 0),
        instruction=None,
        trust_entrypoints=None,
        execution_horizon=1,
    )
    route.bind(types.SimpleNamespace(contract=contract))
    nan = np.array([np.nan, 0.0], np.float32)
    assert route.model_input(nan) is nan
    assert (
        route.model_input([0.5, 0.25]).dtype == np.float32
    )  # a conforming list becomes the space's array
    assert route.model_input([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
