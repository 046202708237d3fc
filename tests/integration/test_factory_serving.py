"""An EnvFactory served over TCP publishes its tags and validates params first (AUTH, CLI-5, DELTA-25)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import rlmesh
from rlmesh.authoring import EnvFactory, ParamError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "adapters"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "factory"))

from reach_env import TAGS, ReachEnv

pytestmark = pytest.mark.timeout(60)


class ReachFactory(EnvFactory):
    tags = TAGS
    workflow_edition = "2026.06"

    def make(self, max_steps: int = 60) -> Any:
        return ReachEnv(max_steps=max_steps)


def test_a_factory_served_over_tcp_stamps_its_tags_into_the_contract(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("RLMESH_ALLOW_REMOTE_SHUTDOWN", "1")
    thread = threading.Thread(
        target=ReachFactory().serve, args=("127.0.0.1:0",), kwargs={"max_steps": 5}, daemon=True
    )
    thread.start()
    address = ""
    deadline = time.monotonic() + 30
    while not address and time.monotonic() < deadline:
        for line in capsys.readouterr().out.splitlines():
            if line.startswith("RLMesh serving env on "):
                address = line.split(" on ", 1)[1].strip()
        time.sleep(0.05)
    assert address, "the factory never announced its address"
    env = rlmesh.numpy.RemoteEnv(address)
    tags = env.metadata[rlmesh.adapters.ENV_METADATA_KEY]
    assert rlmesh.adapters.EnvTags.from_metadata(env.metadata) == TAGS
    assert tags  # the raw published form rides in the contract metadata
    obs, _ = env.reset(seed=0)
    assert obs["wrist_rgb"].shape == (480, 640, 3)
    assert env.shutdown()
    thread.join(10)
    assert not thread.is_alive()


def test_cli_factory_params_are_validated_before_make() -> None:
    from rlmesh._spawn.recipe import load_env_target

    with pytest.raises(ParamError, match="dificulty"):
        load_env_target("point_reach:PointReachFactory", kwargs={"dificulty": "hard"})
    env, factory = load_env_target(
        "point_reach:PointReachFactory", kwargs={"difficulty": "hard"}, num_envs=2
    )
    assert isinstance(env, list) and len(env) == 2  # lanes (DELTA-23)
    factory.close()


def test_tags_on_a_vector_env_are_published_and_checked_per_lane_at_resolve() -> None:
    """SRV-20: a vector env's batched spaces are not validated against per-lane tags at construction."""
    import gymnasium as gym

    import rlmesh.adapters as adapt

    tags = adapt.EnvTags(
        observation=adapt.Split(adapt.Field(adapt.JOINT_POS, 3)),
        action=adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_VEL, dim=1)),
    )
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(2)])
    with rlmesh.EnvServer(venv, "127.0.0.1:0", tags=tags).start() as server:
        client = rlmesh.numpy.RemoteVectorEnv(server.address)
        assert adapt.EnvTags.from_metadata(client.metadata) == tags
        spec = adapt.ModelSpec(
            input=adapt.State(adapt.JOINT_POS),
            output=adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_VEL, dim=1)),
        )
        adapter = adapt.resolve_from_contract(client.env_contract, spec)
        assert "<root>[0:3]" in adapter.describe()  # the per-lane Box(3) split resolved
        client.close()
