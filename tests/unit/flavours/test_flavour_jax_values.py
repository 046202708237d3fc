"""The jax value bridge: decode/encode of every space kind, DLPack sharing, x64, devices (BKD-1, BKD-20/21, BKD-30/31)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlmesh
from conftest import require
from flavour_values import assert_canonical_equal, assert_leaves
from rlmesh._bridge import JAX, JAX_SHARE_MIN_BYTES
from rlmesh.spaces import SpaceSpec
from rlmesh.spaces._values import compile_encoder
from rlmesh.tensor import aligned_empty
from strategies import space_specs, values_for

jax = require("jax")
import jax.numpy as jnp  # noqa: E402

import rlmesh.jax as rj  # noqa: E402


def is_array(x: object) -> bool:
    return isinstance(x, jax.Array)


@st.composite
def spec_value_lanes(draw: st.DrawFn) -> tuple[SpaceSpec, object, int | None]:
    spec = draw(space_specs())
    lanes = draw(st.sampled_from([None, 1, 3]))
    return spec, draw(values_for(spec, lanes)), lanes


@settings(max_examples=100, deadline=None)
@given(spec_value_lanes())
def test_every_space_kind_round_trips_through_jax_values_scalar_and_vector(case) -> None:
    """BKD-1/VAL-6 with x64 on (BKD-20): array leaves become jax.Array, the rest stays; back is exact."""
    spec, canonical, lanes = case
    with jax.enable_x64(True):
        decoded = JAX.compile_decoder(spec, lanes=lanes)(canonical)
        assert_leaves(decoded, spec, lanes, is_array)
        back = compile_encoder(spec, lanes=lanes)(JAX.encode(decoded))
    assert_canonical_equal(back, canonical)


@settings(max_examples=40, deadline=None)
@given(spec_value_lanes())
def test_jax_space_samples_are_jax_values_the_space_contains(case) -> None:
    """VAL-4: rlmesh.jax.space_from_spec samples in the flavour's representation."""
    spec, _, _ = case
    with jax.enable_x64(True):
        space = rj.space_from_spec(spec)
        space.seed(3)
        sample = space.sample()
        assert_leaves(sample, spec, None, is_array)
        assert space.contains(sample)


def test_a_large_aligned_leaf_is_shared_with_xla_without_a_copy() -> None:
    """BKD-20: DLPack import from a 64-byte-aligned buffer keeps the pointer."""
    n = JAX_SHARE_MIN_BYTES // 4
    buf = aligned_empty(JAX_SHARE_MIN_BYTES).view(np.float32)
    buf[:] = np.arange(n, dtype=np.float32)
    arr = rj.asarray(buf)
    assert arr.unsafe_buffer_pointer() == buf.ctypes.data
    t = rlmesh.Tensor(buf.tobytes(), [n], "float32")  # read-only: jax takes a copy of it
    assert rj.asarray(t).tolist() == buf.tolist()


def test_small_or_unaligned_leaves_are_copied_with_their_values() -> None:
    small = np.arange(4, dtype=np.float32)
    assert rj.asarray(small).tolist() == [0, 1, 2, 3]
    buf = aligned_empty(JAX_SHARE_MIN_BYTES + 64)
    unaligned = buf[4 : 4 + JAX_SHARE_MIN_BYTES].view(np.float32)
    unaligned[:] = 1.5
    out = rj.asarray(unaligned)
    assert out.unsafe_buffer_pointer() != unaligned.ctypes.data and bool((out == 1.5).all())


def test_without_x64_a_64_bit_integer_outside_32_bits_is_refused_not_wrapped() -> None:
    """jax would silently wrap 2**40 into an int32; the bridge refuses and names the x64 switch."""
    if jax.config.jax_enable_x64:
        pytest.skip("x64 mode is on in this process")
    assert rj.asarray(np.array([5, -5], np.int64)).dtype == jnp.int32
    with pytest.raises(ValueError, match="jax_enable_x64"):
        rj.asarray(np.array([2**40], np.int64))
    with pytest.raises(ValueError, match="jax_enable_x64"):
        rj.asarray(np.array([2**64 - 1], np.uint64))


def test_small_lane_vectors_with_equal_contents_reuse_one_immutable_array() -> None:
    """Vector rewards/flags that repeat the previous step's contents cost no new array."""
    a = JAX.decode(np.zeros(8, dtype=bool))
    b = JAX.decode(np.zeros(8, dtype=bool))
    c = JAX.decode(np.array([True] + [False] * 7))
    assert a is b and c is not a and c.tolist()[0] is True
    assert JAX.decode(np.array([0.0])).tolist() == [0.0] and JAX.decode(
        np.array([-0.0])
    ) is not JAX.decode(np.array([0.0]))


def test_encoding_jax_arrays_gives_host_arrays_and_rejects_bfloat16() -> None:
    x = jnp.arange(3, dtype=jnp.int32)
    host = JAX.encode({"a": x, "n": 1})
    assert isinstance(host["a"], np.ndarray) and host["a"].tolist() == [0, 1, 2] and host["n"] == 1
    with pytest.raises(ValueError, match="bfloat16"):
        JAX.encode(jnp.zeros(2, dtype=jnp.bfloat16))


def test_from_array_copies_into_a_Tensor_and_unwraps_0d() -> None:
    """BKD-20."""
    out = rj.from_array(jnp.arange(3, dtype=jnp.int16))
    assert (
        isinstance(out, rlmesh.Tensor)
        and out.dtype == "int16"
        and np.asarray(out).tolist() == [0, 1, 2]
    )
    assert rj.from_array(jnp.float32(2.5)) == 2.5
    with pytest.raises(TypeError, match=r"jax\.Array"):
        rj.from_array([1, 2])
    with pytest.raises(ValueError, match="bfloat16"):
        rj.from_array(jnp.zeros(2, dtype=jnp.bfloat16))


def test_tree_stack_fuses_lanes_and_tree_unstack_splits_them() -> None:
    """BKD-31."""
    fused = JAX.tree_stack([(jnp.full((2,), i), f"s{i}") for i in range(3)])
    assert is_array(fused[0]) and fused[0].shape == (3, 2) and fused[1] == ["s0", "s1", "s2"]
    assert [x[0].tolist() for x in JAX.tree_unstack(fused, 3)] == [[0, 0], [1, 1], [2, 2]]
    with pytest.raises(ValueError, match="ragged"):
        JAX.tree_stack([jnp.zeros(2), jnp.zeros(3)])


def test_devices_resolve_or_fail_with_a_ValueError_that_says_why() -> None:
    """BKD-21: a device string resolves to a jax.Device; an absent platform is a clear ValueError."""
    cpu = jax.devices("cpu")[0]
    assert JAX.resolve_device("cpu") == cpu and JAX.resolve_device(cpu) is cpu
    assert JAX.resolve_device("cpu:0") == cpu and JAX.resolve_device(None) is None
    with pytest.raises(ValueError, match="not available"):
        JAX.resolve_device("cpu:99")
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(ValueError, match="present jax platforms: cpu"):
            JAX.resolve_device("cuda:0")
    with pytest.raises(ValueError, match=r"jax\.Device or a string"):
        JAX.resolve_device(3)
    placed = JAX.to_device({"a": np.zeros(2, np.float32)}, "cpu")
    assert placed["a"].devices() == {cpu}


@pytest.mark.parametrize("fast", [True, False])
def test_client_leaves_are_the_same_with_and_without_jax_fast_put(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receive-buffer path (jax's own put, probed once) and its public fallback agree on values and dtypes."""
    from rlmesh import _bridge
    from rlmesh._bridge import _jax_probe

    if not fast:
        monkeypatch.setattr(_jax_probe, "_fast_put", False)
    buf = aligned_empty(64).view(np.float32)[:8].reshape(2, 4)
    buf[:] = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = _bridge.jax_wrap_fresh(buf)
    assert is_array(out) and out.dtype == jnp.float32 and out.tolist() == buf.tolist()
    if fast:  # a fresh aligned buffer is aliased, not copied
        assert out.unsafe_buffer_pointer() == buf.ctypes.data
    ints = _bridge.jax_wrap_fresh(np.array([1, -2, 3], np.int64))
    assert ints.tolist() == [1, -2, 3] and ints.dtype == (
        jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    )
    if not jax.config.jax_enable_x64:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            _bridge.jax_wrap_fresh(np.array([2**40], np.int64))
        assert _bridge.jax_wrap_fresh(np.array([0.5])).dtype == jnp.float32
    with jax.enable_x64(True):
        assert _bridge.jax_wrap_fresh(np.array([2**40], np.int64)).tolist() == [2**40]


def test_an_aliased_receive_buffer_lives_as_long_as_the_jax_array() -> None:
    """No copy, and no dangling pointer: the array keeps the buffer it aliases alive."""
    import gc

    from rlmesh import _bridge

    kept = []
    for k in range(20):
        body = aligned_empty(1 << 15)
        seg = body[64 : 64 + 4096].view(np.float32)
        seg[:] = k
        kept.append((k, _bridge.jax_wrap_fresh(seg)))
        del body, seg
    gc.collect()
    _junk = [np.full(1 << 13, -1.0, np.float32) for _ in range(100)]
    assert [k for k, arr in kept if not bool((arr == k).all())] == []
