"""Value bridges and the numpy helpers (BKD-1/2, BKD-30/31, VAL-2/3)."""

from __future__ import annotations

import importlib.util
import pickle

import numpy as np
import pytest

from rlmesh import Tensor
from rlmesh._bridge import JAX, NUMPY, PLAIN, TORCH, Bridge, asarray, from_array, resolve_bridge
from rlmesh.errors import DependencyMissing
from rlmesh.spaces import Box, Dict, Discrete, Text, Tuple


def test_resolve_bridge_accepts_names_objects_and_none() -> None:  # BKD-30
    assert resolve_bridge("numpy") is NUMPY and resolve_bridge(" NP ") is NUMPY
    assert resolve_bridge("plain") is PLAIN and resolve_bridge(None) is PLAIN
    assert resolve_bridge("Torch") is TORCH and resolve_bridge("jax") is JAX
    assert resolve_bridge(NUMPY) is NUMPY
    with pytest.raises(ValueError, match="unknown value bridge 'tensorflow'"):
        resolve_bridge("tensorflow")
    with pytest.raises(TypeError):
        resolve_bridge(3)  # type: ignore[arg-type]


def test_builtin_bridges_pickle_to_themselves() -> None:
    for bridge in (PLAIN, NUMPY, TORCH, JAX):
        assert pickle.loads(pickle.dumps(bridge)) is bridge


def test_plain_decoder_wraps_arrays_zero_copy_and_lists_batched_discrete() -> None:  # VAL-2/3
    spec = Dict(
        {"p": Box(-1.0, 1.0, (2,)), "d": Discrete(3), "t": Text(2), "u": Tuple([Discrete(2)])}
    ).spec
    arr = np.zeros((2, 2), np.float32)
    tree = {"p": arr, "d": np.array([1, 2]), "t": ["a", "b"], "u": (np.array([0, 1]),)}
    out = PLAIN.compile_decoder(spec, lanes=2)(tree)
    assert isinstance(out["p"], Tensor) and np.shares_memory(np.asarray(out["p"]), arr)
    assert out["d"] == [1, 2] and type(out["d"][0]) is int
    assert out["t"] == ["a", "b"] and out["u"] == ([0, 1],)
    scalar = PLAIN.compile_decoder(spec)({"p": arr[0], "d": 1, "t": "a", "u": (1,)})
    assert scalar["d"] == 1 and isinstance(scalar["p"], Tensor)


def test_numpy_decoder_is_the_identity_and_keeps_batched_discrete_arrays() -> None:  # OPP-20
    spec = Dict({"d": Discrete(3)}).spec
    tree = {"d": np.array([1, 2])}
    assert NUMPY.compile_decoder(spec, lanes=2)(tree) is tree
    assert NUMPY.decode(tree) == tree


def test_generic_decode_walks_containers() -> None:
    out = PLAIN.decode({"a": [np.zeros(1)], "b": (np.ones(2, np.uint8), 3, "s")})
    assert (
        isinstance(out["a"][0], Tensor)
        and isinstance(out["b"][0], Tensor)
        and out["b"][1:] == (3, "s")
    )


def test_plain_and_numpy_encode_pass_values_through() -> None:
    value = {"a": [1, 2], "b": (np.zeros(1),)}
    assert PLAIN.encode(value) == {"a": [1, 2], "b": value["b"]}
    assert NUMPY.encode(value)["b"][0] is value["b"][0]


def test_numpy_tree_stack_fuses_dicts_sequences_strings_and_scalars() -> None:  # BKD-31
    trees = [
        {"x": np.zeros(2), "t": ("a", 1), "s": "u"},
        {"x": np.ones(2), "t": ("b", 2), "s": "v"},
    ]
    fused = NUMPY.tree_stack(trees)
    assert (
        fused["x"].shape == (2, 2)
        and fused["t"][0] == ["a", "b"]
        and fused["t"][1].tolist() == [1, 2]
    )
    assert fused["s"] == ["u", "v"] and isinstance(fused["t"], tuple)
    back = NUMPY.tree_unstack(fused, 2)
    assert back[1]["s"] == "v" and back[1]["t"] == ("b", 2) and back[0]["x"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("trees", "message"),
    [
        ([{"a": 1}, {"b": 1}], "ragged keys across 2 lanes"),
        ([(1, 2), (1,)], "ragged container lengths across 2 lanes"),
        ([np.zeros(2), np.zeros(3)], "ragged observation leaves .* lane 1 has shape \\[3\\]"),
        ([{"a": None}, {"a": 1}], r"None observation leaf across 2 lanes at \$\.a"),
        ([], "at least one tree"),
    ],
)
def test_numpy_tree_stack_rejects_ragged_trees(trees, message: str) -> None:  # BKD-31
    with pytest.raises(ValueError, match=message):
        NUMPY.tree_stack(trees)


def test_tree_unstack_requires_the_leading_axis() -> None:  # BKD-31
    with pytest.raises(ValueError, match="leading batch axis n=3"):
        NUMPY.tree_unstack({"a": np.zeros((2, 1))}, 3)


def test_plain_bridge_cannot_fuse_and_passes_lane_lists() -> None:  # BKD-31
    trees = [{"a": 1}, {"a": 2}]
    assert PLAIN.tree_stack(trees) == trees
    assert PLAIN.tree_unstack(trees, 2) == trees
    with pytest.raises(ValueError, match="list of 3 per-lane values"):
        PLAIN.tree_unstack(trees, 3)


def test_host_bridges_have_no_devices() -> None:  # BKD-13
    assert not NUMPY.supports_device() and not PLAIN.supports_device()
    tree = {"a": np.zeros(1)}
    assert NUMPY.to_device(tree, "cpu") is tree and NUMPY.to_device(tree, None) is tree
    with pytest.raises(ValueError, match="no devices"):
        NUMPY.to_device(tree, "cuda:0")
    assert (
        NUMPY.to_host(np.array([1.0, 2.0])) == [1.0, 2.0] and NUMPY.to_host(np.float64(1.5)) == 1.5
    )
    assert PLAIN.to_host(Tensor(bytes(1), [1], "bool")) == [False]


def test_asarray_returns_a_writable_copy() -> None:  # BKD-1
    t = Tensor(np.arange(3, dtype=np.int16).tobytes(), [3], "int16")
    a = asarray(t)
    a[0] = 9
    assert a.flags.writeable and np.asarray(t)[0] == 0 and a.dtype == np.int16
    assert asarray(3).shape == () and asarray(True).dtype == np.bool_


def test_from_array_copies_arrays_and_unwraps_scalars() -> None:  # BKD-2
    a = np.arange(4, dtype=">f8").reshape(2, 2)[:, ::-1]
    t = from_array(a)
    assert (
        isinstance(t, Tensor)
        and t.shape == [2, 2]
        and t.dtype == "float64"
        and t.tolist() == a.tolist()
    )
    assert from_array(np.float32(0.5)) == 0.5 and from_array(np.array(3)) == 3
    with pytest.raises(TypeError, match="numpy array or scalar"):
        from_array([1, 2])
    with pytest.raises(ValueError, match="complex"):
        from_array(np.zeros(2, np.complex64))


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_torch_bridge_without_torch_names_the_extra() -> None:  # BKD-10
    with pytest.raises(
        DependencyMissing, match=r'pip install torch \(the "torch" extra of rlmesh-py\)'
    ):
        TORCH.ensure_available()
    with pytest.raises(ImportError):
        TORCH.decode(np.zeros(1))


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="jax is installed")
def test_jax_bridge_without_jax_names_the_extra() -> None:  # BKD-21
    with pytest.raises(DependencyMissing, match=r'pip install .*\(the "jax" extra of rlmesh-py\)'):
        JAX.ensure_available()


def test_framework_bridges_leave_plain_values_alone_when_encoding() -> None:
    value = {"a": np.zeros(1), "b": [1, "x"]}
    assert TORCH.encode(value)["a"] is value["a"] and JAX.encode(value)["b"] == [1, "x"]
    assert TORCH.supports_device() and JAX.supports_device()


def test_custom_bridges_subclass_Bridge() -> None:
    class Doubling(Bridge):
        name = "doubling"

        def _leaf_out(self, arr):
            return arr * 2

    space = Box(1.0, 1.0, (2,)).spec.to_space()
    from rlmesh.spaces import space_from_spec

    doubled = space_from_spec(space.spec, bridge=Doubling())
    assert doubled.sample().tolist() == [2.0, 2.0]
