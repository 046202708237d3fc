"""The torch value bridge: decode/encode of every space kind, zero-copy rules, devices (BKD-1, BKD-10..13, BKD-30/31)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlmesh
from conftest import require
from flavour_values import assert_canonical_equal, assert_leaves
from rlmesh._bridge import TORCH
from rlmesh.spaces import SpaceSpec
from rlmesh.spaces._values import compile_encoder
from strategies import space_specs, values_for

torch = require("torch")
import rlmesh.torch as rt  # noqa: E402


def is_tensor(x: object) -> bool:
    return isinstance(x, torch.Tensor)


@st.composite
def spec_value_lanes(draw: st.DrawFn) -> tuple[SpaceSpec, object, int | None]:
    spec = draw(space_specs())
    lanes = draw(st.sampled_from([None, 1, 3]))
    return spec, draw(values_for(spec, lanes)), lanes


@settings(max_examples=150, deadline=None)
@given(spec_value_lanes())
def test_every_space_kind_round_trips_through_torch_values_scalar_and_vector(case) -> None:
    """BKD-1/VAL-6: tensor leaves become torch.Tensor, the rest stays; encoding them back is exact."""
    spec, canonical, lanes = case
    decoded = TORCH.compile_decoder(spec, lanes=lanes)(canonical)
    assert_leaves(decoded, spec, lanes, is_tensor)
    back = compile_encoder(spec, lanes=lanes)(TORCH.encode(decoded))
    assert_canonical_equal(back, canonical)


@settings(max_examples=60, deadline=None)
@given(spec_value_lanes())
def test_torch_space_samples_are_torch_values_the_space_contains(case) -> None:
    """VAL-4: rlmesh.torch.space_from_spec samples in the flavour's representation."""
    spec, _, _ = case
    space = rt.space_from_spec(spec)
    space.seed(3)
    sample = space.sample()
    assert_leaves(sample, spec, None, is_tensor)
    assert space.contains(sample)


def test_as_tensor_shares_memory_by_default_and_copies_on_request() -> None:
    """BKD-10: zero-copy unless copy=True (an owned, writable tensor)."""
    t = rlmesh.Tensor(np.arange(6, dtype=np.float32).tobytes(), [2, 3], "float32")
    shared = rt.as_tensor(t)
    assert shared.data_ptr() == np.asarray(t).ctypes.data
    owned = rt.as_tensor(t, copy=True)
    assert owned.data_ptr() != np.asarray(t).ctypes.data
    owned += 1
    assert np.asarray(t).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert rt.as_tensor(np.zeros((0, 3), np.uint16)).shape == (0, 3)  # zero-size leaves work


def test_decoding_a_writable_array_shares_it_and_a_read_only_one_is_copied() -> None:
    """The client decodes from the (fresh, writable) receive buffer without a copy; read-only sources are copied (BKD-11)."""
    arr = np.arange(4, dtype=np.float32)
    assert TORCH.decode(arr).data_ptr() == arr.ctypes.data
    arr.flags.writeable = False
    copy = TORCH.decode(arr)
    assert copy.data_ptr() != arr.ctypes.data
    copy.mul_(2)  # writable, and the source is untouched
    assert arr.tolist() == [0, 1, 2, 3]


def test_a_contiguous_cpu_action_tensor_is_encoded_from_its_own_memory() -> None:
    """An action tensor on the CPU is sent from its own memory: the encoder's canonical array is a view of it."""
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    spec = rlmesh.spaces.Box(-10, 10, (2, 3)).spec
    canonical = compile_encoder(spec)(TORCH.encode(t))
    assert canonical.ctypes.data == t.data_ptr()
    strided = t.t()  # not contiguous: one copy, values kept
    assert TORCH.encode(strided).tolist() == [[0, 3], [1, 4], [2, 5]]


def test_encoding_drops_gradients_and_rejects_bfloat16() -> None:
    w = torch.ones(3, requires_grad=True)
    assert TORCH.encode(w * 2).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="bfloat16"):
        TORCH.encode(torch.zeros(2, dtype=torch.bfloat16))


def test_from_tensor_copies_into_a_Tensor_and_unwraps_0d() -> None:
    """BKD-12."""
    t = torch.arange(3, dtype=torch.int16)
    out = rt.from_tensor(t)
    assert isinstance(out, rlmesh.Tensor) and out.dtype == "int16" and out.shape == [3]
    t[0] = 7
    assert np.asarray(out).tolist() == [0, 1, 2]
    assert rt.from_tensor(torch.tensor(2.5)) == 2.5
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        rt.from_tensor(np.zeros(2))
    with pytest.raises(ValueError, match="bfloat16"):
        rt.from_tensor(torch.zeros(2, dtype=torch.bfloat16))


def test_tree_stack_fuses_lanes_and_tree_unstack_splits_them() -> None:
    """BKD-31."""
    lanes = [{"x": torch.full((2,), float(i)), "t": f"s{i}"} for i in range(3)]
    fused = TORCH.tree_stack(lanes)
    assert is_tensor(fused["x"]) and fused["x"].shape == (3, 2) and fused["t"] == ["s0", "s1", "s2"]
    back = TORCH.tree_unstack(fused, 3)
    assert [b["x"].tolist() for b in back] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    with pytest.raises(ValueError, match="ragged"):
        TORCH.tree_stack([torch.zeros(2), torch.zeros(3)])


def test_devices_resolve_or_fail_with_a_ValueError_that_says_why() -> None:
    """BKD-13 and the client device= option: cpu is accepted; an absent device is a clear ValueError."""
    assert TORCH.resolve_device("cpu") == torch.device("cpu")
    assert TORCH.resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert TORCH.resolve_device(None) is None
    with pytest.raises(ValueError, match="unknown torch device"):
        TORCH.resolve_device("bogus:0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            TORCH.resolve_device("cuda:0")
    moved = TORCH.to_device({"a": torch.zeros(2), "n": 3}, "meta")  # a device every build has
    assert moved["a"].device.type == "meta" and moved["n"] == 3
    assert (
        TORCH.to_host(torch.tensor([1.0, 2.0])) == [1.0, 2.0]
        and TORCH.to_host(torch.tensor(True)) is True
    )
