"""rlmesh.torch / rlmesh.jax env clients against real servers (BKD-1, BKD-10..21, VAL-6/10/15, seed 001).

A served echo env returns each action as the next observation, so one step checks
both directions. A composite Dict space holds every space kind; hypothesis draws its
values, which round-trip exactly through the scalar client and the vector client
(lanes). The jax client runs with x64 mode on for these round trips (64-bit leaves
otherwise become 32-bit, BKD-20).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from integration_envs import EchoEnv

import rlmesh
import rlmesh.spaces as rs
from conftest import require
from flavour_values import assert_canonical_equal, assert_leaves, host
from rlmesh._bridge import JAX, TORCH
from rlmesh.spaces._values import compile_encoder
from strategies import values_for

pytestmark = pytest.mark.timeout(120)

EVERY_KIND = rs.Dict(
    {
        "box": rs.Box(-1.0, 1.0, (2, 3)),
        "box0": rs.Box(-2.5, 2.5, ()),
        "f64": rs.Box("-inf", "inf", (2,), "float64"),
        "f16": rs.Box(-1.0, 1.0, (3,), "float16"),
        "image": rs.Box(0, 255, (4, 5, 3), "uint8"),
        "i64": rs.Box(-(2**63), 2**63 - 1, (3,), "int64"),
        "u64": rs.Box(0, 2**64 - 1, (2,), "uint64"),
        "flag": rs.Box(0, 1, (4,), "bool"),
        "disc": rs.Discrete(5, start=-2),
        "disc8": rs.Discrete(256, dtype="uint8"),
        "mb": rs.MultiBinary((2, 3)),
        "mbb": rs.MultiBinary(3, dtype="bool"),
        "md": rs.MultiDiscrete([3, 4], "int32", start=[1, -2]),
        "text": rs.Text(6, min_length=0, charset="abc\u03b1\u03b2"),
        "tuple": rs.Tuple([rs.Discrete(3), rs.Box(-1.0, 1.0, (2,), "float64"), rs.Text(2)]),
        "nested": rs.Dict({"z": rs.MultiDiscrete([[2, 3], [4, 5]], "uint16"), "a": rs.Discrete(2)}),
    }
)
LANES = 3


class Flavour:
    def __init__(self, name: str) -> None:
        self.name = name
        self.fw = require(name)
        self.mod = require(f"rlmesh.{name}")
        self.bridge = TORCH if name == "torch" else JAX

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.fw.Tensor if self.name == "torch" else self.fw.Array)

    def x64(self) -> contextlib.AbstractContextManager[Any]:
        return self.fw.enable_x64(True) if self.name == "jax" else contextlib.nullcontext()

    def ptr(self, x: Any) -> int:
        return int(x.data_ptr() if self.name == "torch" else x.unsafe_buffer_pointer())


@pytest.fixture(params=["torch", "jax"], scope="module")
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return Flavour(request.param)


@pytest.fixture(scope="module")
def echo_servers() -> Iterator[dict[str, Any]]:
    scalar_env = EchoEnv(EVERY_KIND, record=False)
    lane_envs = [EchoEnv(EVERY_KIND, record=False) for _ in range(LANES)]
    servers = {
        "scalar": rlmesh.EnvServer(scalar_env, "127.0.0.1:0").start(),
        "vector": rlmesh.EnvServer(lane_envs, "127.0.0.1:0").start(),
    }
    servers["scalar_env"], servers["lane_envs"] = scalar_env, lane_envs
    yield servers
    servers["scalar"].shutdown()
    servers["vector"].shutdown()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_space_kind_round_trips_through_the_scalar_client(
    flavour: Flavour, echo_servers: dict[str, Any], data: st.DataObject
) -> None:
    """Seed 001/BKD-1: actions as framework values in, framework observations out, exactly."""
    spec = EVERY_KIND.spec
    canonical = data.draw(values_for(spec))
    with flavour.x64(), flavour.mod.RemoteEnv(echo_servers["scalar"].address) as env:
        obs, info = env.reset(seed=1)
        assert_leaves(obs, spec, None, flavour.is_array) and "episode_ids" in info
        action = flavour.bridge.compile_decoder(spec)(canonical)  # framework leaves
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated) == (0.5, False, False)
        assert type(reward) is float and type(terminated) is bool  # scalar primitives stay (VAL-6)
        assert_leaves(obs, spec, None, flavour.is_array)
        assert_canonical_equal(compile_encoder(spec)(host(obs)), canonical)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_space_kind_round_trips_through_the_vector_client(
    flavour: Flavour, echo_servers: dict[str, Any], data: st.DataObject
) -> None:
    """Seed 001: batched leaves are [N, ...] framework arrays; rewards/flags are lane arrays."""
    spec = EVERY_KIND.spec
    canonical = data.draw(values_for(spec, LANES))
    with flavour.x64(), flavour.mod.RemoteVectorEnv(echo_servers["vector"].address) as envs:
        assert envs.num_envs == LANES and envs.single_observation_space.spec == spec
        obs, _ = envs.reset(seed=3)
        assert_leaves(obs, spec, LANES, flavour.is_array)
        actions = flavour.bridge.compile_decoder(spec, lanes=LANES)(canonical)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        assert_leaves(obs, spec, LANES, flavour.is_array)
        assert_canonical_equal(compile_encoder(spec, lanes=LANES)(host(obs)), canonical)
        for lane_vec in (rewards, terminated, truncated):
            assert flavour.is_array(lane_vec) and tuple(lane_vec.shape) == (LANES,)
        assert host(rewards).tolist() == [0.5] * LANES and not host(terminated).any()
        assert info["completed_episodes"] == 0 and len(info["episode_ids"]) == LANES


def test_actions_may_be_framework_arrays_numpy_arrays_or_python_values(
    flavour: Flavour, serve: Any
) -> None:
    """VAL-10/13/15: every accepted action form reaches the env as the same numpy value."""
    space = rs.Dict({"v": rs.Box(-5.0, 5.0, (2,)), "d": rs.Discrete(4)})
    env = EchoEnv(space)
    server = serve(env)
    with flavour.mod.RemoteEnv(server.address) as client:
        client.reset()
        fw = flavour.fw.numpy if flavour.name == "jax" else flavour.fw
        for action in (
            {"v": fw.asarray([1.0, -2.0]), "d": fw.asarray(3)},
            {"v": np.array([1.0, -2.0]), "d": np.int64(3)},
            {"v": [1, -2], "d": 3.0},
        ):
            obs, *_ = client.step(action)
            assert env.actions[-1]["v"].tolist() == [1.0, -2.0] and env.actions[-1]["d"] == 3
            assert host(obs["v"]).tolist() == [1.0, -2.0] and obs["d"] == 3
    lanes = [EchoEnv(rs.Discrete(4)) for _ in range(LANES)]
    server = serve(lanes)
    with flavour.mod.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        fw_batch = (
            flavour.fw.tensor([1, 2, 3])
            if flavour.name == "torch"
            else flavour.fw.numpy.asarray([1, 2, 3])
        )
        for batch in (fw_batch, np.array([1, 2, 3]), [1, 2, 3]):
            obs, *_ = envs.step(batch)
            assert [e.actions[-1] for e in lanes] == [1, 2, 3] and host(obs).tolist() == [1, 2, 3]
        with pytest.raises(ValueError, match="expected 3"):
            envs.step([1, 2])


def test_observations_are_decoded_from_the_receive_buffer_without_a_copy(
    flavour: Flavour, serve: Any
) -> None:
    """DLPack/from_numpy sharing checked by pointer: the value is built on the reply's own buffer.

    torch shares every leaf (and the tensor is writable: the buffer is fresh per reply,
    so in-place ops are safe); jax shares leaves of at least 16 KiB (64-byte aligned).
    """
    space = rs.Box(0, 255, (64, 64, 4), "uint8")  # 16 KiB
    server = serve(EchoEnv(space))
    with flavour.mod.RemoteEnv(server.address, device="cpu") as client:
        obs, _ = client.reset()
        wire = client._last_obs  # the canonical array: a view of the receive buffer
        assert flavour.ptr(obs) == wire.ctypes.data
        first = host(obs).copy()
        action = np.full((64, 64, 4), 7, np.uint8)
        obs2, *_ = client.step(action)
        assert flavour.ptr(obs2) == client._last_obs.ctypes.data != wire.ctypes.data
        if flavour.name == "torch":
            obs2 += 1  # writable, and it does not touch the previous step's value
            assert int(obs2[0, 0, 0]) == 8 and host(obs).tolist() == first.tolist()


def test_device_cpu_explicit_and_an_absent_device_is_a_ValueError_before_dialing(
    flavour: Flavour, serve: Any
) -> None:
    """device= on clients: "cpu" works on scalar and vector clients; a missing accelerator is a clear ValueError."""
    server = serve(EchoEnv(rs.Box(-1.0, 1.0, (3,))))
    with flavour.mod.RemoteEnv(server.address, device="cpu") as client:
        obs, _ = client.reset()
        obs, *_ = client.step(np.zeros(3, np.float32))
        assert flavour.is_array(obs)
        if flavour.name == "torch":
            assert client.device == flavour.fw.device("cpu") and obs.device.type == "cpu"
        else:
            assert client.device == flavour.fw.devices("cpu")[0] and obs.devices() == {
                client.device
            }
    lanes = serve([EchoEnv(rs.Box(-1.0, 1.0, (3,))) for _ in range(LANES)])
    with flavour.mod.RemoteVectorEnv(lanes.address, device="cpu") as envs:
        envs.reset()
        obs, rewards, terminated, truncated, _ = envs.step(np.zeros((LANES, 3), np.float32))
        assert all(flavour.is_array(x) for x in (obs, rewards, terminated, truncated))
    has_cuda = (
        flavour.fw.cuda.is_available()
        if flavour.name == "torch"
        else any(d.platform == "gpu" for d in flavour.fw.devices())
    )
    if not has_cuda:
        with pytest.raises(ValueError, match="not available"):
            flavour.mod.RemoteEnv("127.0.0.1:1", device="cuda:0")  # the port is never dialed
        with pytest.raises(ValueError, match="not available"):
            flavour.mod.RemoteVectorEnv("127.0.0.1:1", device="cuda:0")


def test_a_torch_device_receives_every_value_of_a_vector_step_as_one_batch(serve: Any) -> None:
    """device= places observations, rewards and flags; the meta device (on every torch build) shows the move."""
    require("torch")
    import rlmesh.torch as rt

    lanes = serve(
        [
            EchoEnv(rs.Dict({"x": rs.Box(-1.0, 1.0, (2,)), "n": rs.Discrete(3)}))
            for _ in range(LANES)
        ]
    )
    with rt.RemoteVectorEnv(lanes.address, device="meta") as envs:
        obs, _ = envs.reset()
        assert obs["x"].device.type == "meta" and obs["n"].device.type == "meta"
        obs, rewards, terminated, truncated, _ = envs.step(
            {"x": np.zeros((LANES, 2)), "n": [0, 1, 2]}
        )
        assert {t.device.type for t in (obs["x"], obs["n"], rewards, terminated, truncated)} == {
            "meta"
        }
    single = serve(EchoEnv(rs.Box(-1.0, 1.0, (2,))))
    with rt.RemoteEnv(single.address, device="meta") as env:
        obs, _ = env.reset()
        obs, reward, *_ = env.step([0.5, 0.5])
        assert obs.device.type == "meta" and reward == 0.5


def test_render_frames_decode_to_framework_arrays(flavour: Flavour, serve: Any) -> None:
    """VAL-5/VAL-6: a frame is a uint8 framework array (None when the env has none)."""
    from integration_envs import RenderEnv

    frame = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    server = serve(RenderEnv(frame))
    with flavour.mod.RemoteEnv(server.address) as client:
        client.reset()  # a session renders after its first reset (NOT_READY before)
        got = client.render()
        assert flavour.is_array(got) and host(got).tolist() == frame.tolist()


def test_the_jax_vector_client_has_every_seed_001_keyword_property_and_method(serve: Any) -> None:
    """Seed 001: rlmesh.jax.RemoteVectorEnv's constructor keywords, properties and methods."""
    import inspect

    rj = require("rlmesh.jax")
    require("jax")
    params = inspect.signature(rj.RemoteVectorEnv).parameters
    assert list(params)[:9] == [
        "address",
        "host",
        "port",
        "path",
        "transport",
        "connect_timeout_seconds",
        "request_timeout_seconds",
        "workflow_edition",
        "device",
    ]
    lanes = serve([EchoEnv(rs.Discrete(3)) for _ in range(LANES)])
    port = int(lanes.address.rsplit(":", 1)[1])
    with rj.RemoteVectorEnv(
        host="127.0.0.1", port=port, connect_timeout_seconds=5, request_timeout_seconds=30
    ) as envs:
        assert envs.address == lanes.address and envs.num_envs == LANES
        assert (
            envs.single_observation_space.spec == envs.observation_space.spec == rs.Discrete(3).spec
        )
        assert envs.single_action_space.spec == envs.action_space.spec == rs.Discrete(3).spec
        assert len(envs.env_id) == 36 and envs.selected_workflow_edition
        assert envs.env_contract.num_envs == LANES and envs.render_mode is None
        assert (
            isinstance(envs.metadata, Mapping)
            and envs.observation_space_spec == rs.Discrete(3).spec
        )
        assert envs.action_space_spec == rs.Discrete(3).spec
        observations, infos = envs.reset(seed=42)
        assert len(infos["episode_ids"]) == LANES and observations.shape == (LANES,)
        envs.step(np.array([0, 1, 2]))
        assert envs.render(env_index=1) is None
        assert envs.shutdown() is False  # remote shutdown is off unless the server allows it
