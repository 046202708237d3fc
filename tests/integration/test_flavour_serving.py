"""Serving framework envs (framework="torch"|"jax", device=) and framework models (SRV-30..34, MOD-25, MOD-33..).

The envs here speak only their framework: they assert the type of every action
they receive and return framework arrays (rewards and flags too). Clients of any
flavour talk to them (BKD-32: the wire is framework-neutral).
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.numpy as rn
import rlmesh.spaces as rs
from conftest import require
from rlmesh.serve import ModelServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
N = 3


class FW:
    """The bits of a framework the envs need."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mod = require(name)
        self.flavour = require(f"rlmesh.{name}")
        if name == "jax":
            self.np = require("jax.numpy")

    def array(self, x: Any, dtype: str | None = None) -> Any:
        if self.name == "torch":
            return self.mod.as_tensor(np.asarray(x, dtype=dtype))
        return self.np.asarray(np.asarray(x, dtype=dtype))

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.mod.Tensor if self.name == "torch" else self.mod.Array)

    def device_of(self, x: Any) -> str:
        return x.device.type if self.name == "torch" else next(iter(x.devices())).platform


@pytest.fixture(params=["torch", "jax"], scope="module")
def fw(request: pytest.FixtureRequest) -> FW:
    return FW(request.param)


class FrameworkEnv:
    """A scalar env in one framework: Dict action {"v": Box(2), "d": Discrete(3)}, obs = 2 * v."""

    observation_space = rs.Dict({"x": rs.Box(-10.0, 10.0, (2,)), "d": rs.Discrete(3)})
    action_space = rs.Dict({"v": rs.Box(-1.0, 1.0, (2,)), "d": rs.Discrete(3)})

    def __init__(self, fw: FW) -> None:
        self.fw = fw
        self.actions: list[Any] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return {"x": self.fw.array([0.0, 0.0], "float32"), "d": self.fw.array(0, "int64")}, {
            "start": self.fw.array([1.0])
        }

    def step(self, action: Any) -> Any:
        assert self.fw.is_array(action["v"]), type(action["v"])
        self.actions.append(action)
        obs = {"x": action["v"] * 2, "d": self.fw.array(action["d"], "int64")}
        done = self.fw.array(len(self.actions) >= 3)
        return obs, self.fw.array(0.25, "float32"), done, False, {"norm": self.fw.array([1.0, 2.0])}

    def close(self) -> None:
        pass


class FrameworkVectorEnv:
    """A natively batched env in one framework (served as a vector endpoint, SRV-34's "fine" case)."""

    num_envs = N
    single_observation_space = rs.Box(-10.0, 10.0, (2,))
    single_action_space = rs.Dict({"v": rs.Box(-1.0, 1.0, (2,)), "d": rs.Discrete(4)})
    metadata = {"autoreset_mode": "NextStep"}

    def __init__(self, fw: FW) -> None:
        self.fw = fw
        self.actions: list[Any] = []

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        return self.fw.array(np.zeros((N, 2)), "float32"), {}

    def step(self, action: Any) -> Any:
        assert self.fw.is_array(action["v"]) and self.fw.is_array(action["d"])
        self.actions.append(action)
        rewards = self.fw.array(np.arange(N), "float32")
        flags = self.fw.array(np.zeros(N, bool))
        return action["v"] + 1, rewards, flags, flags, {}

    def close(self) -> None:
        pass


def test_a_served_framework_env_receives_framework_actions_and_returns_framework_values(
    fw: FW, serve: Any
) -> None:
    """SRV-30/31/33: actions arrive as the env's framework arrays on its device; its arrays (obs, reward,
    flags, info) travel back to a numpy client and to a client of the same flavour."""
    env = FrameworkEnv(fw)
    server = serve(env, framework=fw.name, device="cpu")
    with rn.RemoteEnv(server.address) as client:
        obs, info = client.reset()
        assert obs["x"].tolist() == [0.0, 0.0] and obs["d"] == 0 and info["start"].tolist() == [1.0]
        obs, reward, terminated, truncated, info = client.step(
            {"v": np.array([0.5, -0.25]), "d": 2}
        )
        assert obs["x"].tolist() == [1.0, -0.5] and obs["d"] == 2
        assert (reward, terminated, truncated) == (0.25, False, False)
        assert info["norm"].tolist() == [1.0, 2.0]
    got = env.actions[-1]
    assert (
        fw.is_array(got["v"]) and fw.device_of(got["v"]) == "cpu" and got["d"] == 2
    )  # Discrete stays an int
    with fw.flavour.RemoteEnv(server.address) as client:
        client.reset()
        obs, *_ = client.step({"v": fw.array([0.5, 0.5], "float32"), "d": 1})
        assert fw.is_array(obs["x"]) and np.asarray(obs["x"]).tolist() == [1.0, 1.0]
        *_, terminated, _, _ = client.step({"v": [0.0, 0.0], "d": 0})
        *_, terminated, _, _ = client.step({"v": [0.0, 0.0], "d": 0})
        assert terminated is True  # a framework bool flag arrives as a bool


def test_a_served_framework_vector_env_receives_fused_batches(fw: FW, serve: Any) -> None:
    """Beyond the reference: a torch/jax vector env is served; actions arrive as [N, ...] arrays
    (batched Discrete as an int array) and its batched results come back per lane."""
    env = FrameworkVectorEnv(fw)
    server = serve(env, framework=fw.name)
    with fw.flavour.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=0)
        obs, rewards, terminated, truncated, info = envs.step(
            {"v": np.full((N, 2), 0.5), "d": [0, 1, 3]}
        )
        assert np.asarray(obs).tolist() == [[1.5, 1.5]] * N
        assert np.asarray(rewards).tolist() == [0.0, 1.0, 2.0] and not np.asarray(terminated).any()
    got = env.actions[-1]
    assert tuple(got["v"].shape) == (N, 2) and np.asarray(got["d"]).tolist() == [0, 1, 3]


def test_lanes_of_framework_envs_each_receive_their_own_framework_action(
    fw: FW, serve: Any
) -> None:
    """A list of scalar framework envs served as lanes: every lane gets its slice as a framework array."""
    envs = [FrameworkEnv(fw) for _ in range(N)]
    server = serve(envs, framework=fw.name)
    with rn.RemoteVectorEnv(server.address) as client:
        client.reset()
        client.step({"v": np.array([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]), "d": np.array([0, 1, 2])})
    for i, e in enumerate(envs):
        assert fw.is_array(e.actions[-1]["v"]) and e.actions[-1]["d"] == i
        assert np.allclose(np.asarray(e.actions[-1]["v"]), 0.1 * (i + 1))


def test_a_torch_env_served_on_a_device_receives_its_actions_there(serve: Any) -> None:
    """SRV-32: device= places incoming action tensors (the meta device exists on every torch build)."""
    fw = FW("torch")
    devices: list[str] = []

    class OnDevice(FrameworkEnv):
        def step(self, action: Any) -> Any:
            devices.append(action["v"].device.type)
            return {"x": fw.array([0.0, 0.0], "float32"), "d": 0}, 0.0, False, False, {}

    server = serve(OnDevice(fw), framework="torch", device="meta")
    with rn.RemoteEnv(server.address) as client:
        client.reset()
        client.step({"v": [0.5, 0.5], "d": 1})
    assert devices == ["meta"]


def test_serving_on_an_absent_device_is_a_ValueError_at_construction(fw: FW) -> None:
    has_gpu = (
        fw.mod.cuda.is_available()
        if fw.name == "torch"
        else any(d.platform == "gpu" for d in fw.mod.devices())
    )
    if has_gpu:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="not available"):
        rlmesh.EnvServer(FrameworkEnv(fw), "127.0.0.1:0", framework=fw.name, device="cuda:0")


def test_a_host_array_in_a_framework_env_observation_warns_once_per_type(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """SRV-33: a foreign (non-framework) array leaf is sent as is, with one warning per type."""
    fw = FW("torch")

    class Mixed(FrameworkEnv):
        def step(self, action: Any) -> Any:
            return {"x": np.zeros(2, np.float32), "d": 1}, 0.0, False, False, {}

    server = serve(Mixed(fw), framework="torch")
    with (
        caplog.at_level(logging.WARNING, logger="rlmesh.serve"),
        rn.RemoteEnv(server.address) as client,
    ):
        client.reset()
        for _ in range(3):
            obs, *_ = client.step({"v": [0.0, 0.0], "d": 0})
            assert obs["x"].tolist() == [0.0, 0.0]
    warned = [r for r in caplog.records if "numpy.ndarray" in r.getMessage()]
    assert len(warned) == 1


class TorchPolicy:
    """Built lazily so importing this module never needs torch."""

    @staticmethod
    def make(seen: list[Any]) -> Any:
        import rlmesh.torch as rt

        class Policy(rt.Model):
            device = "cpu"

            def predict(self, obs: Any) -> Any:
                seen.append(obs)
                return (obs[2] > 0).long()

        return Policy()


def _jax_policy(seen: list[Any]) -> Any:
    import rlmesh.jax as rj

    class Policy(rj.Model):
        device = "cpu"

        def predict(self, obs: Any) -> Any:
            seen.append(obs)
            return (obs[2] > 0).astype("int32")

    return Policy()


def _policy(fw: FW, seen: list[Any]) -> Any:
    return TorchPolicy.make(seen) if fw.name == "torch" else _jax_policy(seen)


def test_a_served_framework_model_sees_framework_arrays_and_matches_the_local_run(fw: FW) -> None:
    """MOD-1/MOD-25 on the served path: RemoteModel drives a served torch/jax model; same rewards as locally."""
    seeds = [0, 1]
    local_seen: list[Any] = []
    local = rlmesh.run(_policy(fw, local_seen), gym.make("CartPole-v1"), seeds=seeds)
    served_seen: list[Any] = []
    server = ModelServer(_policy(fw, served_seen), "127.0.0.1:0").start()
    try:
        result = rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=seeds)
    finally:
        server.shutdown()
    assert [e.reward for e in result.episodes] == [e.reward for e in local.episodes]
    assert served_seen and all(fw.is_array(o) and fw.device_of(o) == "cpu" for o in served_seen)
    assert all(fw.is_array(o) for o in local_seen)


def test_a_local_framework_model_runs_against_a_served_framework_env(fw: FW) -> None:
    """rlmesh.run(torch/jax model, address of a framework-served env): both seams convert, rewards add up."""
    seen: list[Any] = []

    class Target:
        observation_space = rs.Box(-10.0, 10.0, (4,))
        action_space = rs.Discrete(2)

        def __init__(self) -> None:
            self.t = 0

        def reset(self, *, seed: Any = None, options: Any = None) -> Any:
            self.t = 0
            return fw.array([0.0, 0.0, 1.0, 0.0], "float32"), {}

        def step(self, action: Any) -> Any:
            self.t += 1
            return (
                fw.array([0.0, 0.0, 1.0 - self.t, 0.0], "float32"),
                fw.array(1.0),
                self.t >= 4,
                False,
                {},
            )

        def close(self) -> None:
            pass

    with rlmesh.EnvServer(Target(), "127.0.0.1:0", framework=fw.name).start() as server:
        result = rlmesh.run(_policy(fw, seen), server.address, seeds=[5])
    assert result.episodes[0].steps == 4 and result.episodes[0].reward == 4.0
    assert all(fw.is_array(o) for o in seen)


def test_the_serve_command_line_serves_a_torch_env_with_framework_and_device(
    serve_process: Any,
) -> None:
    """``python -m rlmesh.serve target --framework torch --device cpu`` (SRV-30/32 on the CLI)."""
    require("torch")
    _, address = serve_process(
        "flavour_envs:make_torch_doubler", "--framework", "torch", "--device", "cpu"
    )
    with rn.RemoteEnv(address) as client:
        client.reset()
        obs, reward, terminated, _, info = client.step(np.array([0.25, -0.5], np.float32))
        assert obs.tolist() == [0.5, -1.0] and reward == 1.0 and terminated is False
        assert info["device"] == "cpu"


def test_a_served_torch_env_renders_tensor_frames_and_an_env_without_render_has_none(
    serve: Any,
) -> None:
    """SRV-33/RND: a render frame may be a tensor; no render() means no frame, not an error."""
    fw = FW("torch")

    class Painter(FrameworkEnv):
        def render(self) -> Any:
            return fw.mod.full((2, 3, 3), 7, dtype=fw.mod.uint8)

    painted = serve(Painter(fw), framework="torch")
    with rn.RemoteEnv(painted.address) as client:
        client.reset()  # a session renders after its first reset (NOT_READY before)
        assert client.render().tolist() == [[[7] * 3] * 3] * 2
    plain = serve(FrameworkEnv(fw), framework="torch")
    with rn.RemoteEnv(plain.address) as client:
        client.reset()
        assert client.render() is None
        client.step({"v": [0.0, 0.0], "d": 0})  # the session is fine


def test_the_flavours_example_runs_end_to_end() -> None:
    """examples/flavours.py: a torch vector env served with framework="torch", a jax client, a torch model."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    require("torch")
    require("jax")
    root = Path(__file__).resolve().parents[2]
    env = {
        k: v for k, v in os.environ.items() if k != "RLMESH_WORKFLOW_EDITION"
    }  # as a user runs it
    out = subprocess.run(
        [sys.executable, "examples/flavours.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert out.returncode == 0, out.stderr
    assert "WorkflowEditionWarning" not in out.stderr  # the example declares its edition
    assert "jax client: obs " in out.stdout and "(4, 1), rewards float32" in out.stdout
    assert "torch model: 8 episodes" in out.stdout
