"""SBX-20/21: argument checks of SandboxEnv / SandboxVectorEnv that fail before anything starts."""

from __future__ import annotations

from typing import Any

import pytest
from sbx_fakes import fake_docker_fixture  # noqa: F401  (the fake_docker fixture)

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.sandbox import DockerUnavailable, SandboxBuild, SandboxEnv, SandboxVectorEnv


@pytest.mark.parametrize("key", ["num_envs", "vectorization_mode"])
def test_SBX20_SandboxEnv_is_single_env_only(key: str) -> None:
    with pytest.raises(TypeError, match="SandboxEnv is single-env only; use SandboxVectorEnv"):
        SandboxEnv("gym://CartPole-v1", **{key: 2})


@pytest.mark.parametrize("n", [0, 1, -3])
def test_SBX21_SandboxVectorEnv_needs_two_lanes(n: int) -> None:
    with pytest.raises(ValueError, match="num_envs >= 2"):
        SandboxVectorEnv("gym://CartPole-v1", n)


@pytest.mark.parametrize("mode", ["Sync", "ASYNC", "threads", ""])
def test_SBX21_vectorization_mode_is_checked(mode: str) -> None:
    with pytest.raises(ValueError, match="vectorization_mode"):
        SandboxVectorEnv("gym://CartPole-v1", 2, vectorization_mode=mode)


def test_SBX20_options_and_timeout_are_checked_before_any_work(fake_docker: Any) -> None:
    with pytest.raises(TypeError, match="build must be a SandboxBuild"):
        SandboxEnv("gym://CartPole-v1", build={"packages": []})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="connect_timeout_seconds"):
        SandboxEnv("gym://CartPole-v1", connect_timeout_seconds=0)
    with pytest.raises(TypeError, match="build=SandboxBuild"):
        SandboxEnv("gym://CartPole-v1", packages=["x"])
    assert fake_docker.calls() == []


def test_docker_backend_on_a_down_daemon_fails_clearly(fake_docker: Any) -> None:
    fake_docker.on(
        "version",
        {
            "rc": 1,
            "stderr": "Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?",
        },
    )
    with pytest.raises(DockerUnavailable, match="daemon is not reachable"):
        SandboxEnv("gym://CartPole-v1", backend="docker", build=SandboxBuild(base_image="b:1"))
    with pytest.raises(DockerUnavailable):
        SandboxEnv("docker://repo/env:1")
    assert "run" not in fake_docker.commands() and "build" not in fake_docker.commands()


def test_the_sandbox_names_are_exported() -> None:
    for name in (
        "SandboxBuild",
        "SandboxEnv",
        "SandboxModel",
        "SandboxRuntime",
        "SandboxVectorEnv",
    ):
        assert name in rlmesh.__all__ and hasattr(rlmesh, name)
    for name in (
        "SandboxBuild",
        "SandboxEnv",
        "SandboxInfo",
        "SandboxModel",
        "SandboxRuntime",
        "SandboxVectorEnv",
    ):
        assert name in rnp.__all__ and hasattr(rnp, name)
    assert issubclass(rnp.SandboxEnv, rnp.RemoteEnv) and issubclass(
        rnp.SandboxVectorEnv, rnp.RemoteVectorEnv
    )
    assert issubclass(rlmesh.SandboxEnv, rlmesh.RemoteEnv) and issubclass(
        rlmesh.SandboxVectorEnv, rlmesh.RemoteVectorEnv
    )
