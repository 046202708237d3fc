"""EnvFleet without Ray (these run in the main suite): arguments refused before Ray is touched,
and what an actor builds from its spec (the sandbox relay)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from conftest import require
from rlmesh.ray import EnvFleet


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("CartPole-v1", 0), {}, ValueError, "n must be >= 1"),
        (("CartPole-v1", "2"), {}, TypeError, "n must be an int"),
        (("CartPole-v1", 2), {"lanes": 0}, ValueError, "lanes must be >= 1"),
        ((42, 2), {}, TypeError, "env must be a Gymnasium id"),
        (("  ", 2), {}, ValueError, "env must name an env"),
        (("CartPole-v1", 2), {"max_restarts": -2}, ValueError, "max_restarts must be an int >= -1"),
        (
            ("CartPole-v1", 2),
            {"resources": {"CPU": -1}},
            ValueError,
            "resource 'CPU' must be a finite amount",
        ),
        (("CartPole-v1", 2), {"resources": ["CPU"]}, TypeError, "resources must be a mapping"),
        (
            ("CartPole-v1", 2),
            {"autoreset": "same-step"},
            ValueError,
            "autoreset applies to lanes > 1",
        ),
        (("CartPole-v1", 2), {"env_kwargs": [1]}, TypeError, "env_kwargs must be a mapping"),
        (("CartPole-v1", 2), {"options": {"idle": 1}}, TypeError, "options must be a ServeOptions"),
        (
            ("CartPole-v1", 2),
            {"start_timeout_seconds": 0},
            ValueError,
            "start_timeout_seconds must be positive",
        ),
        (
            ("CartPole-v1", 2),
            {"actor_options": {"lifetime": "detached"}},
            ValueError,
            "never detached",
        ),
        ((lambda: None, 2), {"sandbox": "venv"}, TypeError, "sandbox source string"),
        (
            ("gym://CartPole-v1", 2),
            {"sandbox": {"image": "x"}},
            TypeError,
            "sandbox= takes the keys",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_error(
    args: Any, kwargs: Any, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        EnvFleet(*args, **kwargs)


def test_importing_rlmesh_ray_does_not_import_ray() -> None:
    code = "import sys, rlmesh, rlmesh.ray; print('ray' in sys.modules, 'gymnasium' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_sandboxed_env_is_relayed_on_the_actors_address_without_shadowed_info(
    lanes: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What an actor does with ``sandbox=``: start the sandbox (here: a served env standing in for
    it), then serve that client again. The relayed info must not carry the first hop's runtime keys."""
    import gymnasium as gym
    import numpy as np

    import rlmesh
    import rlmesh.numpy as rnp
    from rlmesh._spawn import EnvRecipe
    from rlmesh.ray import _actor
    from rlmesh.serve import Lanes

    inner_env = (
        gym.make("CartPole-v1")
        if lanes == 1
        else Lanes([gym.make("CartPole-v1") for _ in range(lanes)])
    )
    sandbox_server = rlmesh.EnvServer(inner_env, "127.0.0.1:0").start()
    started: list[tuple[str, dict[str, Any]]] = []

    def fake_sandbox(cls: Any) -> Any:
        def start(source: str, **kwargs: Any) -> Any:
            started.append((source, kwargs))
            return cls(sandbox_server.address)

        return start

    monkeypatch.setattr(_actor._numpy, "SandboxEnv", fake_sandbox(rnp.RemoteEnv))
    monkeypatch.setattr(_actor._numpy, "SandboxVectorEnv", fake_sandbox(rnp.RemoteVectorEnv))
    recipe = EnvRecipe(_actor.SandboxedEnv("gym://CartPole-v1", lanes, {"backend": "venv"}))
    relay, factory = recipe.build().env, None
    relay_server = rlmesh.EnvServer(relay, "127.0.0.1:0").start()
    client_cls = rnp.RemoteEnv if lanes == 1 else rnp.RemoteVectorEnv
    client = client_cls(relay_server.address)
    try:
        assert factory is None
        assert started[0][0] == "gym://CartPole-v1" and started[0][1]["backend"] == "venv"
        if lanes > 1:
            assert started[0][1]["num_envs"] == lanes
        obs, _ = client.reset(seed=0)
        want = gym.make("CartPole-v1").reset(seed=0)[0]
        np.testing.assert_array_equal(obs if lanes == 1 else obs[0], want)
        for _ in range(3):
            info = client.step(0 if lanes == 1 else np.zeros(lanes, dtype=np.int64))[4]
        assert "episode_ids" in info  # the relay's own runtime keys
        assert not [
            r for r in caplog.records if "shadows the runtime-reserved key" in r.getMessage()
        ]
    finally:
        client.close()
        relay_server.shutdown()
        sandbox_server.shutdown()


@pytest.mark.parametrize("ray_address", [None, "10.1.2.3:6379"])
def test_a_fleet_before_ray_init_starts_a_loopback_ray_unless_RAY_ADDRESS_names_a_cluster(
    ray_address: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = require("ray", "the rlmesh[ray] extra")
    if ray.is_initialized():
        pytest.skip("Ray is already running in this process")
    calls: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def fake_init(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise Stop  # never start (or dial) anything

    monkeypatch.setattr(ray, "init", fake_init)
    if ray_address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", ray_address)
    with pytest.raises(Stop):
        EnvFleet("CartPole-v1", 1)
    assert calls == (
        [{"address": "local", "_node_ip_address": "127.0.0.1", "include_dashboard": False}]
        if ray_address is None
        else [{"include_dashboard": False}]
    )
