"""Every space kind as observation AND action through a real server, both client flavours.

The served env echoes each action back as the next observation, so one step checks
the action path (client encode -> server decode -> env) and the observation path
(env -> server encode -> client decode). Values must round-trip exactly: dtype,
shape and contents (VAL-2, VAL-6, DESIGN "Rank-0 Box, Discrete/MultiBinary/
MultiDiscrete dtypes, MultiDiscrete start, Text min_length=0, declared Dict key order
... all round-trip exactly"), and numpy observations must be writable and never alias
another step's data (BKD-3).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from integration_envs import EchoEnv

import rlmesh
import rlmesh.numpy as rnp
import rlmesh.spaces as rs

pytestmark = pytest.mark.timeout(60)

SPACES: list[tuple[str, Any]] = [
    ("box-f32", rs.Box(-1.0, 1.0, (3,))),
    ("box-rank0", rs.Box(-2.5, 2.5, ())),
    ("box-f64-2d", rs.Box("-inf", "inf", (2, 3), "float64")),
    ("box-f16", rs.Box(-1.0, 1.0, (4,), "float16")),
    ("box-uint8-image", rs.Box(0, 255, (4, 5, 3), "uint8")),
    ("box-int64-extremes", rs.Box(-(2**63), 2**63 - 1, (3,), "int64")),
    ("box-uint64", rs.Box(0, 2**64 - 1, (2,), "uint64")),
    ("box-int16", rs.Box(-5, 9, (2, 2), "int16")),
    ("box-int8-rank0", rs.Box(-3, 7, (), "int8")),
    ("box-bool", rs.Box(0, 1, (5,), "bool")),
    ("discrete", rs.Discrete(4)),
    ("discrete-negative-start", rs.Discrete(5, start=-2)),
    ("discrete-int32-start", rs.Discrete(3, start=10, dtype="int32")),
    ("discrete-uint8", rs.Discrete(256, dtype="uint8")),
    ("multibinary", rs.MultiBinary(5)),
    ("multibinary-2d-bool", rs.MultiBinary((2, 3), dtype="bool")),
    ("multibinary-int8", rs.MultiBinary(3, dtype="int8")),
    ("multidiscrete", rs.MultiDiscrete([2, 3, 4])),
    ("multidiscrete-start", rs.MultiDiscrete([3, 4], "int32", start=[1, -2])),
    ("multidiscrete-2d", rs.MultiDiscrete([[2, 3], [4, 5]], "uint16")),
    ("text", rs.Text(8)),
    ("text-min0", rs.Text(5, min_length=0, charset="ab")),
    ("text-unicode", rs.Text(4, min_length=2, charset="αβγ✓")),
    (
        "dict-declared-order",
        rs.Dict(
            {
                "zeta": rs.Discrete(2),
                "alpha": rs.Box(0.0, 1.0, (2,)),
                "mid": rs.Text(3, min_length=0),
            }
        ),
    ),
    ("tuple", rs.Tuple([rs.Discrete(3), rs.Box(-1.0, 1.0, (2,), "float64")])),
    (
        "nested",
        rs.Dict(
            {
                "obs": rs.Dict(
                    {"image": rs.Box(0, 255, (2, 2, 3), "uint8"), "state": rs.Box(-1.0, 1.0, (4,))}
                ),
                "extra": rs.Tuple(
                    [rs.MultiBinary(2), rs.MultiDiscrete([2, 2], start=[5, 5]), rs.Text(2)]
                ),
            }
        ),
    ),
]
IDS = [name for name, _ in SPACES]


def assert_numpy_equal(got: Any, want: Any, path: str = "$") -> None:
    """Exact equality of numpy-flavoured value trees: type, dtype, shape, contents, key order."""
    if isinstance(want, dict):
        assert isinstance(got, dict), path
        assert list(got) == list(want), f"{path}: key order {list(got)} != {list(want)}"
        for k in want:
            assert_numpy_equal(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_numpy_equal(g, w, f"{path}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {type(got).__name__}"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{path}: {got.dtype}{got.shape}"
        )
        np.testing.assert_array_equal(got, want, err_msg=path)
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def as_numpy(value: Any) -> Any:
    """A plain-client value tree (Tensor leaves) viewed as numpy, for comparison."""
    if isinstance(value, dict):
        return {k: as_numpy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(as_numpy(v) for v in value)
    if isinstance(value, rlmesh.Tensor):
        return np.asarray(value)
    return value


def array_leaves(value: Any) -> list[np.ndarray]:
    if isinstance(value, dict):
        return [a for v in value.values() for a in array_leaves(v)]
    if isinstance(value, tuple):
        return [a for v in value for a in array_leaves(v)]
    return [value] if isinstance(value, np.ndarray) else []


@pytest.mark.parametrize("space", [s for _, s in SPACES], ids=IDS)
@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_numpy_RemoteEnv_round_trips_every_space_kind_exactly(serve, space, transport):
    env = EchoEnv(space)
    server = serve(env, transport)
    with rnp.RemoteEnv(server.address) as client:
        assert client.observation_space_spec == space.spec
        assert client.action_space_spec == space.spec
        obs, _ = client.reset(seed=1)
        assert_numpy_equal(obs, env.first)  # env -> client
        client.action_space.seed(5)
        for _ in range(3):
            action = client.action_space.sample()
            obs, reward, terminated, truncated, _ = client.step(action)
            assert_numpy_equal(env.actions[-1], action)  # client -> env, as numpy (SRV-30)
            assert_numpy_equal(obs, action)  # and back
            assert (reward, terminated, truncated) == (0.5, False, False)


@pytest.mark.parametrize("space", [s for _, s in SPACES], ids=IDS)
def test_plain_RemoteEnv_round_trips_every_space_kind_as_Tensor_leaves(serve, space):
    env = EchoEnv(space)
    server = serve(env)
    with rlmesh.RemoteEnv(server.address) as client:
        obs, _ = client.reset()
        assert_numpy_equal(as_numpy(obs), env.first)
        client.action_space.seed(9)
        action = client.action_space.sample()  # Tensor leaves (VAL-4)
        obs, *_ = client.step(action)
        leaves = [obs] if not isinstance(obs, (dict, tuple)) else []
        for leaf in leaves:
            if space.kind in ("box", "multi_binary", "multi_discrete"):
                assert isinstance(leaf, rlmesh.Tensor)
                assert leaf.dtype == space.dtype and leaf.shape == list(space.shape)
        assert_numpy_equal(as_numpy(obs), as_numpy(action))
        assert_numpy_equal(env.actions[-1], as_numpy(action))


@pytest.mark.parametrize(
    "space",
    [
        s
        for n, s in SPACES
        if n in ("box-uint8-image", "box-rank0", "nested", "multidiscrete-start")
    ],
    ids=["box-uint8-image", "box-rank0", "nested", "multidiscrete-start"],
)
def test_numpy_observations_are_writable_and_never_alias_between_steps(serve, space):
    server = serve(EchoEnv(space))
    with rnp.RemoteEnv(server.address) as client:
        client.action_space.seed(0)
        first, _ = client.reset()
        a1 = client.action_space.sample()
        obs1, *_ = client.step(a1)
        obs2, *_ = client.step(client.action_space.sample())
        assert_numpy_equal(obs1, a1)
        leaves1, leaves2 = array_leaves(obs1), array_leaves(obs2)
        assert leaves1, "the space has array leaves"
        for x, y in zip(leaves1, leaves2):
            assert x.flags.writeable  # BKD-3: obs /= 255.0 style code is safe
            assert not np.shares_memory(x, y)
        for z in array_leaves(first):
            assert all(not np.shares_memory(z, x) for x in leaves1)
        snapshot = [y.copy() for y in leaves2]
        for x in leaves1:
            x[...] = 0  # writing an old observation ...
        for y, s in zip(leaves2, snapshot):
            np.testing.assert_array_equal(y, s)  # ... never changes a newer one


def test_numpy_actions_reach_the_env_as_writable_arrays_of_the_declared_dtype(serve):
    env = EchoEnv(rs.Dict({"arm": rs.Box(-1.0, 1.0, (7,)), "grip": rs.MultiBinary(1)}))
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        # float64 input is coerced to the declared float32 (VAL-11)
        client.step({"arm": np.linspace(-1, 1, 7), "grip": [1]})
    arm = env.actions[-1]["arm"]
    assert arm.dtype == np.float32 and arm.shape == (7,)
    np.testing.assert_allclose(arm, np.linspace(-1, 1, 7).astype(np.float32))
    assert env.actions[-1]["grip"].dtype == np.uint8


def test_a_large_image_observation_round_trips_over_unix(serve):
    space = rs.Box(0, 255, (224, 224, 3), "uint8")
    server = serve(EchoEnv(space), "unix")
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        image = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
        obs, *_ = client.step(image)
        assert_numpy_equal(obs, image)


# -- the same catalog through a lane endpoint (RemoteVectorEnv, VAL-3, VAL-15, DELTA-14) --------


def stack(trees: list[Any]) -> Any:
    """Per-lane numpy values -> one batched value (dict/tuple of batched children)."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: stack([t[k] for t in trees]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack([t[i] for t in trees]) for i in range(len(first)))
    if isinstance(first, str):
        return [*trees]
    return np.stack([np.asarray(t) for t in trees])


def lane(batched: Any, i: int) -> Any:
    """Lane ``i`` of a batched numpy value."""
    if isinstance(batched, dict):
        return {k: lane(v, i) for k, v in batched.items()}
    if isinstance(batched, tuple):
        return tuple(lane(v, i) for v in batched)
    if isinstance(batched, list):
        return batched[i]
    return batched[i, ...]


@pytest.mark.parametrize("space", [s for _, s in SPACES], ids=IDS)
@pytest.mark.parametrize("form", ["per-lane-list", "batched"])
def test_numpy_RemoteVectorEnv_round_trips_every_space_kind_through_lanes(serve, space, form):
    envs = [EchoEnv(space, seed=i) for i in range(3)]
    server = serve(envs)
    with rnp.RemoteVectorEnv(server.address) as client:
        obs, _ = client.reset()
        for i, env in enumerate(envs):
            assert_numpy_equal(_as_scalar(lane(obs, i), space), env.first)
        client.action_space.seed(3)
        actions = [client.action_space.sample() for _ in envs]
        obs, rewards, terminated, truncated, _ = client.step(
            actions if form == "per-lane-list" else stack(actions)
        )
        assert rewards.tolist() == [0.5] * 3 and not terminated.any() and not truncated.any()
        for i, env in enumerate(envs):
            # each lane env got exactly what a scalar endpoint would hand it (SRV-30)
            assert_numpy_equal(env.actions[-1], actions[i])
            assert_numpy_equal(_as_scalar(lane(obs, i), space), actions[i])
        for x in array_leaves(obs):
            assert x.flags.writeable


def _as_scalar(value: Any, space: Any) -> Any:
    """A lane slice of a batched numpy obs in the scalar representation (Discrete -> int)."""
    kind = space.kind
    if kind == "dict":
        return {k: _as_scalar(value[k], space[k]) for k in value}
    if kind == "tuple":
        return tuple(_as_scalar(v, s) for v, s in zip(value, space.spaces))
    if kind == "discrete":
        return int(value)
    return value


@pytest.mark.parametrize(
    "space",
    [s for _, s in SPACES],
    ids=IDS,
)
def test_plain_RemoteVectorEnv_accepts_a_list_of_per_lane_samples(serve, space):
    envs = [EchoEnv(space, seed=i) for i in range(2)]
    server = serve(envs)
    with rlmesh.RemoteVectorEnv(server.address) as client:
        client.reset()
        client.action_space.seed(4)
        actions = [client.action_space.sample() for _ in envs]
        client.step(actions)
        for i, env in enumerate(envs):
            assert_numpy_equal(env.actions[-1], as_numpy(actions[i]))
