"""rlmesh.torch.Model / rlmesh.jax.Model run locally: framework inputs on model.device, fusion, de-chunk (MOD-1, MOD-14, MOD-25/26, MOD-32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require

gym = require("gymnasium")


def cartpole() -> Any:
    return gym.make("CartPole-v1")


def vector_cartpole(n: int = 3) -> Any:
    return gym.vector.SyncVectorEnv([cartpole for _ in range(n)])


# -- torch ---------------------------------------------------------------------------------


def test_a_torch_model_sees_tensors_on_its_device_and_may_return_tensors() -> None:
    """MOD-25 with device="cpu" explicit: every observation is a CPU tensor; a tensor action drives the env."""
    torch = require("torch")
    import rlmesh.torch as rt

    seen: list[Any] = []

    class Policy(rt.Model):
        device = "cpu"

        def predict(self, obs: Any) -> Any:
            seen.append(obs)
            return (obs[2] > 0).long()  # a 0-d tensor action

    result = rlmesh.run(Policy(), cartpole(), seeds=[0])
    assert result.episodes[0].steps == len(seen) > 5
    assert all(
        isinstance(o, torch.Tensor) and o.device.type == "cpu" and o.dtype == torch.float32
        for o in seen
    )


def test_a_torch_model_device_set_in_load_is_honoured_at_predict_time() -> None:
    """MOD-25: device is read at predict time; the meta device proves the move happened."""
    torch = require("torch")
    import rlmesh.torch as rt

    devices: list[str] = []

    class Policy(rt.Model):
        def load(self) -> None:
            self.device = "meta"

        def predict(self, obs: Any) -> Any:
            devices.append(obs.device.type)
            return 0

    rlmesh.run(Policy(), cartpole(), seeds=[0], max_episode_steps=3)
    assert devices == ["meta"] * 3
    assert torch.device("meta").type == "meta"


def test_a_torch_model_with_an_absent_device_fails_with_a_ValueError() -> None:
    require("torch")
    import rlmesh.torch as rt

    model = rt.Model(lambda obs: 0)
    model.device = "cuda:7"
    with pytest.raises(ValueError, match=r"not available|CUDA"):
        rlmesh.run(model, cartpole(), seeds=[0], max_episode_steps=2)


def test_torch_predict_batch_receives_fused_tensors_from_a_vector_env() -> None:
    """MOD-32: lanes fuse with torch.stack to [N, ...]; the batched action is split back per lane."""
    torch = require("torch")
    import rlmesh.torch as rt

    shapes: list[tuple[int, ...]] = []

    class Batched(rt.Model):
        def predict_batch(self, obs: Any) -> Any:
            assert isinstance(obs, torch.Tensor)
            shapes.append(tuple(obs.shape))
            return (obs[:, 2] > 0).long()

    result = rlmesh.run(Batched(), vector_cartpole(3), episodes=3, seeds=[0, 1, 2])
    assert result.num_episodes == 3
    assert shapes and set(shapes) <= {(n, 4) for n in (1, 2, 3)} and (3, 4) in shapes


def test_a_torch_chunk_model_derives_predict_from_frame_0() -> None:
    """MOD-14: a chunk-only torch model runs un-chunked by taking frame 0."""
    torch = require("torch")
    import rlmesh.torch as rt

    class Chunky(rt.Model):
        def predict_chunk(self, obs: Any, execution_horizon: int) -> Any:
            return torch.tensor([1, 0, 1])[: max(execution_horizon, 1)]

    model = Chunky()
    assert model.predict(torch.zeros(4)) == 1
    result = rlmesh.run(model, cartpole(), seeds=[0], execution_horizon=3, max_episode_steps=6)
    assert result.episodes[0].steps == 6


def test_a_host_model_with_a_device_is_refused_by_run_and_by_serve() -> None:
    """MOD-26."""
    import rlmesh.numpy as rn

    model = rn.Model(lambda obs: 0)
    model.device = "cpu"
    with pytest.raises(ValueError, match="requires a torch/jax model"):
        rlmesh.run(model, cartpole(), seeds=[0])
    with pytest.raises(ValueError, match="requires a torch/jax model"):
        rlmesh.serve.ModelServer(model, "127.0.0.1:0")


# -- jax -----------------------------------------------------------------------------------


def test_a_jax_model_sees_arrays_on_its_device() -> None:
    """MOD-25 for jax with device="cpu" explicit."""
    jax = require("jax")
    import rlmesh.jax as rj

    cpu = jax.devices("cpu")[0]
    seen: list[Any] = []

    class Policy(rj.Model):
        device = "cpu"

        def predict(self, obs: Any) -> Any:
            seen.append(obs)
            return (obs[2] > 0).astype("int32")

    result = rlmesh.run(Policy(), cartpole(), seeds=[0])
    assert result.episodes[0].steps == len(seen) > 5
    assert all(isinstance(o, jax.Array) and o.devices() == {cpu} for o in seen)


def test_a_jitted_jax_predict_batch_receives_fused_arrays_from_a_vector_env() -> None:
    """MOD-32 with a jax.jit-compiled batched corner."""
    jax = require("jax")
    import rlmesh.jax as rj

    shapes: list[tuple[int, ...]] = []

    @jax.jit
    def act(obs: Any) -> Any:
        return (obs[:, 2] > 0).astype("int32")

    class Batched(rj.Model):
        def predict_batch(self, obs: Any) -> Any:
            assert isinstance(obs, jax.Array)
            shapes.append(tuple(obs.shape))
            return act(obs)

    result = rlmesh.run(Batched(), vector_cartpole(3), episodes=3, seeds=[0, 1, 2])
    assert result.num_episodes == 3 and (3, 4) in shapes


def test_jax_models_fuse_dict_observations_and_split_dict_actions() -> None:
    """MOD-32 on containers: dict lanes stack per key, text leaves stay a list."""
    require("jax")
    import jax.numpy as jnp

    from rlmesh.models import _values

    bridge = _values.get_bridge("jax")
    fused = bridge.tree_stack(
        [{"x": np.ones(2, np.float32), "t": "a"}, {"x": np.zeros(2, np.float32), "t": "b"}]
    )
    assert fused["x"].shape == (2, 2) and fused["t"] == ["a", "b"]
    lanes = bridge.tree_unstack({"a": jnp.arange(2), "b": [0, 1]}, 2)
    assert [int(lane["a"]) for lane in lanes] == [0, 1] and [lane["b"] for lane in lanes] == [0, 1]
    with pytest.raises(ValueError, match="ragged"):
        bridge.tree_stack([{"x": np.ones(2)}, {"x": np.ones(3)}])
