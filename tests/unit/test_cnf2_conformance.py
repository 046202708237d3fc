"""Conformance round 2, in-process items: CNF2-A1, A2, A4, A10, B2..B6 (spec/conformance-2.md)."""

from __future__ import annotations

import ctypes
import io
import string
import sys
from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A
from rlmesh import Tensor
from rlmesh.models import ModelBase, NumpyModel
from rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Text,
    Tuple,
    from_gymnasium_space,
    space_from_spec,
    to_gymnasium_space,
)
from unit.adapters._helpers import (
    STD_ACTION_SPACE,
    box,
    dict_space,
    std_obs_space,
    std_output,
    std_tags,
)

# -- CNF2-A1: shape is a list equal to spec.shape ------------------------------------------


@pytest.mark.parametrize(
    ("space", "shape"),
    [
        (Box(-1.0, 1.0, shape=(2, 3)), [2, 3]),
        (MultiBinary([2, 3]), [2, 3]),
        (MultiDiscrete([2, 3]), [2]),
        (Discrete(4), []),
        (Text(8), []),
        (Dict({"a": Discrete(2)}), []),
        (Tuple((Discrete(2), Box(0.0, 1.0, shape=(1,)))), []),
    ],
)
def test_cnf2_a1_shape_is_a_list_equal_to_spec_shape(space: Any, shape: list[int]) -> None:
    assert space.shape == shape and type(space.shape) is list
    assert space.shape == space.spec.shape
    for rewrapped in (space_from_spec(space.spec), from_gymnasium_space(to_gymnasium_space(space))):
        assert rewrapped.shape == shape and type(rewrapped.shape) is list


# -- CNF2-A2: unrestricted Text -> printable Gymnasium Text -------------------------------


def test_cnf2_a2_unrestricted_text_becomes_a_printable_gymnasium_text() -> None:
    gym_text = to_gymnasium_space(Text(64, min_length=2))
    assert "".join(sorted(gym_text.character_set)) == "".join(sorted(set(string.printable)))
    assert gym_text.contains("pick up the object!")
    assert (gym_text.min_length, gym_text.max_length) == (2, 64)


def test_cnf2_a2_an_explicit_charset_is_kept_and_gym_default_still_maps_back_to_unrestricted() -> (
    None
):
    gs = pytest.importorskip("gymnasium").spaces
    kept = to_gymnasium_space(Text(5, charset="abc"))
    assert set(kept.character_set) == {"a", "b", "c"}
    assert from_gymnasium_space(gs.Text(5)).charset == ""  # GYM-5 unchanged


# -- CNF2-A4: model.spec is the resolved spec ----------------------------------------------

SPEC_A = A.ModelSpec({"s": A.State(A.EEF_POS)}, std_output())
SPEC_B = A.ModelSpec({"t": A.Text(A.INSTRUCTION)}, std_output())


class SpecdPolicy:
    spec = SPEC_A

    def predict(self, obs: Any) -> int:
        return 0


class WithClassSpec(NumpyModel[Any, Any]):
    spec = SPEC_A

    def predict(self, obs: Any) -> int:
        return 0


def test_cnf2_a4_model_spec_reports_the_resolved_spec() -> None:
    assert NumpyModel(SpecdPolicy()).spec is SPEC_A  # the policy's spec attribute
    assert NumpyModel(SpecdPolicy(), spec=SPEC_B).spec is SPEC_B
    assert WithClassSpec(spec=SPEC_B).spec is SPEC_B
    assert WithClassSpec().spec is SPEC_A
    assert NumpyModel(lambda obs: 0).spec is None
    assert WithClassSpec.spec is SPEC_A  # the class attribute is untouched


# -- CNF2-B5 ------------------------------------------------------------------------------


def test_cnf2_b5_a_model_as_a_models_source_says_instantiate_your_subclass() -> None:
    for source in (WithClassSpec, WithClassSpec()):
        with pytest.raises(TypeError, match="Instantiate your Model subclass"):
            NumpyModel(source)
    assert issubclass(WithClassSpec, ModelBase)


# -- CNF2-A10: memoryview(tensor) -----------------------------------------------------------

FORMATS = {
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d",
}  # fmt: skip


def _array(dtype: str, shape: list[int]) -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 2).astype(dtype).reshape(shape)


def _tensor(dtype: str, shape: list[int]) -> Tensor:
    return Tensor(_array(dtype, shape).tobytes(), shape, dtype)


@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_cnf2_a10_tensor_buffer_is_a_typed_read_only_nd_view(dtype: str) -> None:
    t = _tensor(dtype, [2, 3])
    views = [t.buffer]
    if sys.version_info >= (
        3,
        12,
    ):  # the buffer protocol from Python code needs 3.12 (docs/models.md)
        views.append(memoryview(t))
    for view in views:
        assert view.format == FORMATS[dtype]
        assert view.itemsize == np.dtype(dtype).itemsize
        assert view.shape == (2, 3)
        assert view.strides == (3 * view.itemsize, view.itemsize)
        assert view.readonly
        assert bytes(view) == _array(dtype, [2, 3]).tobytes()  # the raw data
        with pytest.raises(TypeError):
            view[0, 0] = 0
    assert t.buffer == views[-1]


def test_cnf2_a10_a_rank_0_tensor_gives_a_0_d_view() -> None:
    t = Tensor(np.array(7, np.int64).tobytes(), [], "int64")
    view = t.buffer
    assert view.ndim == 0 and view.shape == () and view.tolist() == 7


@pytest.mark.skipif(
    sys.version_info < (3, 12), reason="a pure-Python buffer export needs Python 3.12 (PEP 688)"
)
def test_cnf2_a10_a_writable_buffer_request_is_a_buffer_error() -> None:
    t = _tensor("float32", [2])
    with pytest.raises(BufferError):
        t.__buffer__(0x1)  # PyBUF_WRITABLE
    assert memoryview(t).format == "f"


# -- CNF2-B6: Tensor.from_dlpack errors -----------------------------------------------------


def test_cnf2_b6_from_dlpack_without_dunder_dlpack_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="__dlpack__"):
        Tensor.from_dlpack(object())


def test_cnf2_b6_a_consumed_capsule_is_a_type_error() -> None:
    capsule = np.arange(3.0).__dlpack__()
    assert Tensor.from_dlpack(capsule).shape == [3]
    with pytest.raises(TypeError, match="consumed"):
        Tensor.from_dlpack(capsule)


class _GpuProducer:
    def __dlpack__(self, **_: Any) -> Any:
        return np.arange(3.0).__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA


def test_cnf2_b6_a_non_cpu_producer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="only CPU"):
        Tensor.from_dlpack(_GpuProducer())


@pytest.mark.parametrize("versioned", [False, True])
def test_cnf2_b6_a_capsule_whose_device_is_not_cpu_is_a_value_error(versioned: bool) -> None:
    arr = np.arange(3.0)
    capsule = arr.__dlpack__(max_version=(1, 0)) if versioned else arr.__dlpack__()
    name = b"dltensor_versioned" if versioned else b"dltensor"
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes, get.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    word = ctypes.sizeof(ctypes.c_void_p)
    device = ctypes.c_int32.from_address(
        get(capsule, name) + (8 + 2 * word + 8 + word if versioned else word)
    )
    assert device.value == 1
    device.value = 2  # pretend the producer lives on a CUDA device
    try:
        with pytest.raises(ValueError, match="only CPU"):
            Tensor.from_dlpack(capsule)
    finally:
        device.value = 1  # the capsule's deleter runs on CPU memory


# -- CNF2-B2: adapter images use each frame's real size --------------------------------------


def _image_adapter(leaf: A.Image, shape: list[int]) -> A.Adapter:
    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY)}, A.Action(A.Actuator("x/a", 1)))
    return A.resolve(
        tags,
        dict_space(cam=box(shape, "uint8")),
        box([1]),
        A.ModelSpec({"img": leaf}, A.Action(A.Actuator("x/a", 1))),
    )


def test_cnf2_b2_each_frame_is_resized_from_its_real_size() -> None:
    from rlmesh.adapters._ops_image import Resizer

    adapter = _image_adapter(A.Image(A.IMAGE_PRIMARY, size=8), [16, 16, 3])
    rng = np.random.default_rng(0)
    for h, w in [(16, 16), (32, 24), (10, 10), (32, 24)]:
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        out = adapter.transform_obs({"cam": frame})["img"]
        assert out.shape == (8, 8, 3)
        if (h, w) == (10, 10):
            assert np.array_equal(out, Resizer(10, 10, 8, 8, "bilinear")(frame))


def test_cnf2_b2_fit_stays_as_resolved_and_no_resize_passes_the_frame_through() -> None:
    cropped = _image_adapter(A.Image(A.IMAGE_PRIMARY, size=8, fit="crop"), [16, 16, 3])
    assert cropped.transform_obs({"cam": np.zeros((16, 32, 3), np.uint8)})["img"].shape == (8, 8, 3)
    plain = _image_adapter(A.Image(A.IMAGE_PRIMARY), [16, 16, 3])
    frame = np.full((12, 20, 3), 9, np.uint8)
    assert np.array_equal(plain.transform_obs({"cam": frame})["img"], frame)


@pytest.mark.parametrize(
    "bad", [np.zeros((16, 16, 4), np.uint8), np.zeros((16, 16), np.uint8)], ids=["channels", "rank"]
)
def test_cnf2_b2_only_a_wrong_rank_or_channel_count_is_an_error(bad: np.ndarray) -> None:
    adapter = _image_adapter(A.Image(A.IMAGE_PRIMARY, size=8), [16, 16, 3])
    with pytest.raises(ValueError, match=r"channel|3-D"):
        adapter.transform_obs({"cam": bad})


# -- CNF2-B3: adapter error wording ----------------------------------------------------------


def _resolve(inputs: dict[str, Any], output: A.Action | None = None, **kw: Any) -> A.Adapter:
    return A.resolve(
        std_tags(),
        std_obs_space(),
        STD_ACTION_SPACE,
        A.ModelSpec(inputs, output or std_output()),
        **kw,
    )


def _ident(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64)


STD_OBS = {
    "cam": np.zeros((8, 8, 3), np.uint8),
    "eef_pos": np.zeros(3, np.float32),
    "eef_quat": np.array([0, 0, 0, 1], np.float32),
    "gripper": np.zeros(2, np.float32),
    "instruction": "hi",
}


def _custom_action() -> A.Action:
    enc = A.CustomEncoding("axis_angle", from_base=_ident, to_base=_ident)
    comps = std_output().components
    return A.Action(comps[0], A.Actuator(A.ACTION_DELTA_ROT, 3, encoding=enc), comps[2])


def _wire_spec(arm: str) -> A.ModelSpec:
    enc = A.CustomEncoding("quat_xyzw", from_base=_ident, to_base=_ident)
    raw = A.ModelSpec({"s": A.State(A.EEF_ROT, encoding=enc)}, std_output()).to_dict()
    raw["input"]["s"]["components"][0]["encoding"]["from_base"] = arm
    raw["input"]["s"]["components"][0]["encoding"]["to_base"] = arm
    return A.ModelSpec.from_dict(raw)


B3_CASES: list[tuple[str, Any, type[BaseException], str]] = [
    ("image size and height", lambda: A.Image(A.IMAGE_PRIMARY, size=8, height=4), ValueError, "size=, or height"),
    ("split role twice", lambda: A.Split(A.Field(A.EEF_POS, dim=3), A.Field(A.EEF_POS, dim=3)), ValueError, "role more than once"),
    ("bytes for a state input", lambda: _resolve({"s": A.State(A.EEF_POS)}).transform_obs({**STD_OBS, "eef_pos": b"xyz"}), ValueError, "bytes values are only valid"),
    ("undecodable image bytes", lambda: _resolve({"i": A.Image(A.IMAGE_PRIMARY)}).transform_obs({**STD_OBS, "cam": b"not an image"}), ValueError, "could not decode image bytes"),
    ("custom State in a list container", lambda: _resolve({"s": A.State(A.EEF_ROT, encoding=A.CustomEncoding("quat_xyzw", from_base=_ident, to_base=_ident), container="list")}), A.AdapterResolutionError, "container='array'"),
    ("unknown bare rotation encoding", lambda: _resolve({"s": A.State(A.EEF_ROT, encoding="quaternion")}), A.AdapterResolutionError, "unknown rotation encoding"),
    ("custom encoding not inverse", lambda: _resolve({"s": A.State(A.EEF_ROT, encoding=A.CustomEncoding("quat_xyzw", from_base=lambda x: np.asarray(x) * 2, to_base=_ident))}), A.AdapterResolutionError, "not inverses"),
    ("transform_action mapping", lambda: _resolve({"s": A.State(A.EEF_POS)}, _custom_action()).transform_action({"a": np.zeros(7)}), TypeError, "flat array action"),
    ("actuator dim vs custom base width", lambda: A.Actuator(A.ACTION_DELTA_ROT, 5, encoding=A.CustomEncoding("rot6d", from_base=_ident, to_base=_ident)), ValueError, "must be"),
    ("from_base not 1-D", lambda: _resolve({"s": A.State(A.EEF_ROT, encoding=A.CustomEncoding("quat_xyzw", from_base=lambda x: np.zeros((2, 2)), to_base=_ident))}, check_inverse=False).transform_obs(STD_OBS), ValueError, "flat width-4"),
    ("<local> arm read from the wire", lambda: _resolve(dict(_wire_spec("<local>").input)), A.AdapterResolutionError, "did not travel"),
    ("entrypoint arm", lambda: _resolve(dict(_wire_spec("os.path:join").input)), A.AdapterResolutionError, "not supported yet"),
    ("entrypoint arm, trusted", lambda: _resolve(dict(_wire_spec("os.path:join").input), trust_entrypoints=True), A.AdapterResolutionError, "not supported yet"),
    ("non-JSON tag metadata", lambda: _rfc_non_json(), A.AdapterResolutionError, "not serializable JSON"),
    ("normalize min > max", lambda: A.Image(A.IMAGE_PRIMARY, normalize=(1.0, 0.0)), ValueError, "min must be <= max"),
    ("Concat part with a dtype", lambda: A.Concat(A.State(A.EEF_POS, dtype="int32")), ValueError, "container fields"),
    ("EnvTags.from_metadata non-mapping", lambda: A.EnvTags.from_metadata({A.ENV_METADATA_KEY: 5}), A.AdapterResolutionError, "must hold a mapping"),
    ("ModelSpec.from_metadata non-mapping", lambda: A.ModelSpec.from_metadata({A.MODEL_METADATA_KEY: 5}), A.AdapterResolutionError, "must hold a mapping"),
    ("EnvTags observation list", lambda: A.EnvTags([A.StateTag(A.EEF_POS)], A.Action(A.Actuator("x/a", 1))), TypeError, "must be a leaf, a dict, or a tuple"),
]  # fmt: skip


class _Contract:
    def __init__(self, metadata: Any) -> None:
        self.observation_space = dict_space(p=box([3]))
        self.action_space = box([1])
        self.metadata = metadata


def _rfc_non_json() -> Any:
    tags = A.EnvTags({"p": A.StateTag(A.EEF_POS)}, A.Action(A.Actuator("x/a", 1))).to_dict()
    tags["observation"]["p"]["x-note"] = {1, 2}  # a set is not JSON
    spec = A.ModelSpec({"s": A.State(A.EEF_POS)}, A.Action(A.Actuator("x/a", 1)))
    return A.resolve_from_contract(_Contract({A.ENV_METADATA_KEY: tags}), spec)


@pytest.mark.parametrize(("label", "call", "exc", "phrase"), B3_CASES, ids=[c[0] for c in B3_CASES])
def test_cnf2_b3_adapter_error_wording(
    label: str, call: Any, exc: type[BaseException], phrase: str
) -> None:
    with pytest.raises(exc, match=phrase.replace("(", r"\(").replace(")", r"\)")) as info:
        call()
    assert type(info.value) is exc or isinstance(info.value, exc)


def test_cnf2_b3_not_inverses_also_from_resolve_from_contract() -> None:
    enc = A.CustomEncoding("quat_xyzw", from_base=lambda x: np.asarray(x) * 2, to_base=_ident)
    tags = A.EnvTags(
        {"q": A.StateTag(A.EEF_ROT, encoding="quat_xyzw")}, A.Action(A.Actuator("x/a", 1))
    )
    contract = _Contract({A.ENV_METADATA_KEY: tags.to_dict()})
    contract.observation_space = dict_space(q=box([4]))
    with pytest.raises(A.AdapterResolutionError, match="not inverses"):
        A.resolve_from_contract(
            contract,
            A.ModelSpec({"s": A.State(A.EEF_ROT, encoding=enc)}, A.Action(A.Actuator("x/a", 1))),
        )


def test_cnf2_b3_png_and_jpeg_bytes_decode_and_pillow_absence_is_still_a_value_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    PIL = pytest.importorskip("PIL.Image")  # rlmesh[gymnasium] / rlmesh[adapters] install it
    adapter = _resolve({"i": A.Image(A.IMAGE_PRIMARY)})
    frame = np.random.default_rng(3).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    for fmt in ("PNG", "JPEG"):
        buf = io.BytesIO()
        PIL.fromarray(frame).save(buf, format=fmt)
        out = adapter.transform_obs({**STD_OBS, "cam": buf.getvalue()})["i"]
        assert out.shape == (8, 8, 3)
        if fmt == "PNG":
            assert np.array_equal(out, frame)
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    with pytest.raises(ValueError, match="could not decode image bytes"):
        adapter.transform_obs({**STD_OBS, "cam": b"\x89PNG\r\n\x1a\n"})


# -- CNF2-B4: a CustomEncoding inside an accept-set ------------------------------------------


@pytest.mark.parametrize(
    ("make", "prefix"),
    [
        (lambda enc: A.State(A.EEF_ROT, encoding=["quat_xyzw", enc]), "State 'proprio/eef_rot'"),
        (
            lambda enc: A.StateTag(A.EEF_ROT, encoding=["quat_xyzw", enc]),
            "StateTag 'proprio/eef_rot'",
        ),
        (
            lambda enc: A.Field(A.EEF_ROT, dim=4, encoding=["quat_xyzw", enc]),
            "Field 'proprio/eef_rot'",
        ),
    ],
    ids=["State", "StateTag", "Field"],
)
def test_cnf2_b4_custom_encoding_in_an_accept_set_is_a_value_error(make: Any, prefix: str) -> None:
    enc = A.CustomEncoding("rot6d", from_base=_ident, to_base=_ident)
    with pytest.raises(ValueError, match="accept-set") as info:
        make(enc)
    assert str(info.value).startswith(prefix)
