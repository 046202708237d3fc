"""Sandboxes on a real Docker engine (SBX-1..26): builds, episodes, BYO images, failures, orphans.

Needs a running daemon (``.ci/run`` starts one and builds the offline base image
``rlmesh/base:bookworm-py``; no registry is reachable). Without a daemon the tests
skip locally and FAIL under ``RLMESH_REQUIRE_ALL=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlmesh
from conftest import REQUIRE_ALL, require, require_tool
from rlmesh.sandbox import (
    DockerUnavailable,
    SandboxBuild,
    SandboxCrashed,
    SandboxModel,
    SandboxStartError,
)
from sandbox_demo import demo_wheel

pytestmark = pytest.mark.e2e

BASE_IMAGE = "rlmesh/base:bookworm-py"


def _docker(
    *args: str, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def docker_ready() -> str:
    """A reachable daemon and a base image; returns the base image name."""
    require_tool("docker", "the Docker CLI runs the sandbox containers")
    try:
        ok = (
            _docker(
                "version", "--format", "{{.Server.Version}}", timeout=15.0, check=False
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        why = f"no Docker daemon answers (DOCKER_HOST={os.environ.get('DOCKER_HOST', '<unset>')})"
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why)
    base = os.environ.get("RLMESH_SANDBOX_BASE_IMAGE") or BASE_IMAGE
    if _docker("image", "inspect", base, check=False).returncode != 0:
        why = f"base image {base!r} is missing (.ci/run builds it with mmdebstrap; no registry is reachable)"
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why)
    return base


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, docker_ready: str) -> None:
    monkeypatch.setenv("RLMESH_SANDBOX_BASE_IMAGE", docker_ready)
    monkeypatch.setenv("RLMESH_SANDBOX_BACKEND", "docker")
    monkeypatch.delenv("RLMESH_SANDBOX_RLMESH_PACKAGE", raising=False)


def _ours() -> list[str]:
    """Containers (any state) labelled as owned by this process."""
    out = _docker(
        "ps", "-aq", "--no-trunc", "--filter", f"label=rlmesh.sandbox.owner-pid={os.getpid()}"
    ).stdout
    return out.split()


def _episode(env: Any, seed: int = 0, cap: int = 600) -> tuple[int, bool]:
    obs, info = env.reset(seed=seed)
    assert "episode_ids" in info
    for n in range(1, cap + 1):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            return n, bool(truncated)
    raise AssertionError("the episode did not end")


@pytest.fixture(scope="module")
def sandbox_image(docker_ready: str) -> Iterator[str]:
    """The image built from gym://CartPole-v1 (built once, by the first test that needs it)."""
    os.environ["RLMESH_SANDBOX_BASE_IMAGE"] = docker_ready
    try:
        with rlmesh.numpy.SandboxEnv("gym://CartPole-v1", backend="docker") as env:
            tag = _docker(
                "inspect", "--format", "{{.Config.Image}}", env.sandbox.container_id
            ).stdout.strip()
    finally:
        os.environ.pop("RLMESH_SANDBOX_BASE_IMAGE", None)
    yield tag
    # Keep the current image (a re-run reuses it) and drop the ones older code left behind.
    repo = tag.split(":", 1)[0]
    for ref in _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repo).stdout.split():
        if ref != tag:
            _docker("rmi", ref, check=False)


def test_SBX7_SBX20_build_from_gym_and_run_an_episode(sandbox_image: str) -> None:
    assert sandbox_image.startswith("rlmesh-sandbox-cartpole-v1:")
    with rlmesh.numpy.SandboxEnv("gym://CartPole-v1", backend="docker") as env:
        info = env.sandbox
        assert (info.requested_source, info.resolved_source, info.backend) == (
            "gym://CartPole-v1",
            "gym://CartPole-v1",
            "docker",
        )
        assert info.address.startswith("tcp://127.0.0.1:") and env.address == info.address
        assert _ours() == [info.container_id]
        assert env.env_contract.id == "CartPole-v1"
        steps, _ = _episode(env)
        assert steps >= 1
        assert env.observation_space.shape == [4]  # CNF2-A1: a list, equal to spec.shape
        assert "container_id=" in repr(env)
    assert _ours() == []  # SBX-19: close stops and removes the container


def test_SBX13_the_container_runs_hardened_and_labelled(sandbox_image: str) -> None:
    with rlmesh.SandboxEnv("gym://CartPole-v1") as env:
        raw = _docker("inspect", env.sandbox.container_id).stdout
    meta = json.loads(raw)[0]
    host = meta["HostConfig"]
    assert host["Init"] is True
    assert [c.upper() for c in host["CapDrop"]] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    bindings = host["PortBindings"]["50051/tcp"]
    assert bindings[0]["HostIp"] == "127.0.0.1"
    labels = meta["Config"]["Labels"]
    assert labels["rlmesh.sandbox"] == "1" and labels["rlmesh.sandbox.owner-pid"] == str(
        os.getpid()
    )
    assert host.get("AutoRemove") is False
    assert meta["Name"].startswith("/rlmesh-sandbox-cartpole-v1-")


def test_SBX7_runtime_params_reuse_the_image(sandbox_image: str) -> None:
    with rlmesh.numpy.SandboxEnv("gym://CartPole-v1", max_episode_steps=7) as env:
        image = _docker(
            "inspect", "--format", "{{.Config.Image}}", env.sandbox.container_id
        ).stdout.strip()
        steps, truncated = _episode(env, seed=1)
        assert steps <= 7
    assert image == sandbox_image  # make kwargs are not hash inputs: no rebuild


def test_SBX21_vector_lanes_live_in_one_container(sandbox_image: str) -> None:
    with rlmesh.numpy.SandboxVectorEnv("gym://CartPole-v1", 3) as env:
        assert env.num_envs == 3 and len(_ours()) == 1
        obs, info = env.reset(seed=5)
        assert obs.shape == (3, 4) and len(info["episode_ids"]) == 3
        for _ in range(20):
            obs, rewards, terms, truncs, info = env.step(
                env.action_space.sample() if False else [0, 1, 0]
            )
            assert rewards.shape == (3,)
            done = [i for i in range(3) if terms[i] or truncs[i]]
            if done and env.autoreset_mode == "Disabled":
                env.reset(env_indices=done)
    assert _ours() == []


def test_SBX21_gymnasium_vector_mode_in_the_container(sandbox_image: str) -> None:
    with rlmesh.numpy.SandboxVectorEnv("gym://CartPole-v1", 2, vectorization_mode="sync") as env:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 4)
        env.step([0, 1])


def test_SBX17_SBX18_a_failing_make_reports_the_log_tail_and_leaves_no_container(
    sandbox_image: str,
) -> None:
    with pytest.raises(SandboxStartError, match="exited before becoming ready") as info:
        rlmesh.SandboxEnv("gym://CartPole-v1", no_such_kwarg=1)
    assert "no_such_kwarg" in str(info.value)  # the container's own traceback
    assert _ours() == []


def test_crashed_server_is_reported_with_its_last_log_lines(sandbox_image: str) -> None:
    env = rlmesh.SandboxEnv("gym://CartPole-v1")
    try:
        env.reset(seed=0)
        _docker("kill", env.sandbox.container_id)
        with pytest.raises(SandboxCrashed, match="last log lines") as info:
            for _ in range(5):
                env.step(0)
        assert "RLMesh sandbox serving" in str(info.value)
        assert isinstance(info.value, ConnectionError)
    finally:
        env.close()
    assert _ours() == []


def test_SBX15_containers_of_another_host_or_unknown_provenance_are_never_reaped(
    sandbox_image: str, docker_ready: str
) -> None:
    """Issue 28 item 15: a shared daemon's other host (same init pid namespace id, dead-looking pid) is spared."""
    ns = os.readlink("/proc/self/ns/pid")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    labels = [
        [
            "--label",
            "rlmesh.sandbox=1",
            "--label",
            f"rlmesh.sandbox.owner-pid={dead.pid}",
            "--label",
            f"rlmesh.sandbox.owner-pid-ns={ns}",
            "--label",
            "rlmesh.sandbox.owner-boot-id=another-host",
        ],
        ["--label", "rlmesh.sandbox=1"],  # no owner labels at all
    ]
    ids = [
        _docker(
            "create", *extra, "--entrypoint", "python", sandbox_image, "-c", "pass"
        ).stdout.strip()
        for extra in labels
    ]
    try:
        with rlmesh.SandboxEnv("gym://CartPole-v1"):  # every start reaps first
            pass
        for cid in ids:
            assert _docker("ps", "-aq", "--no-trunc", "--filter", f"id={cid}").stdout.strip() == cid
    finally:
        for cid in ids:
            _docker("rm", "-f", cid, check=False)


def test_SBX15_orphans_of_a_dead_owner_are_reaped(sandbox_image: str, docker_ready: str) -> None:
    code = textwrap.dedent(
        """
        import os, rlmesh
        env = rlmesh.SandboxEnv("gym://CartPole-v1")
        print(env.sandbox.container_id, flush=True)
        os._exit(0)  # no close(): the container is orphaned
        """
    )
    child_env = {
        **os.environ,
        "RLMESH_SANDBOX_BASE_IMAGE": docker_ready,
        "RLMESH_SANDBOX_BACKEND": "docker",
        "RLMESH_SANDBOX_PROGRESS": "0",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env,
        check=True,
    )
    orphan = out.stdout.strip().splitlines()[-1]
    assert _docker("ps", "-q", "--no-trunc", "--filter", f"id={orphan}").stdout.strip() == orphan
    with rlmesh.SandboxEnv("gym://CartPole-v1"):  # every start reaps first
        assert _docker("ps", "-aq", "--no-trunc", "--filter", f"id={orphan}").stdout.strip() == ""


def test_SBX9_a_local_wheel_the_host_lacks_is_injected_into_the_image(
    sandbox_image: str, tmp_path: Path
) -> None:
    build = SandboxBuild(packages=[str(demo_wheel(tmp_path))], imports=["sbxdemo"])
    with rlmesh.numpy.SandboxEnv(
        "gym://SbxDemo-v0", build=build, level=4, connect_timeout_seconds=60
    ) as env:
        image = _docker(
            "inspect", "--format", "{{.Config.Image}}", env.sandbox.container_id
        ).stdout.strip()
        obs, info = env.reset(seed=0)
        assert info["sbxdemo"] == "7.3.1" and obs.tolist() == pytest.approx([7.31, 4.0])
    assert _ours() == []
    _docker("rmi", image, check=False)


def test_SBX10_hf_source_builds_from_a_pinned_commit(
    sandbox_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git = require_tool("git")
    repo = tmp_path / "hub" / "acme" / "cart"
    repo.mkdir(parents=True)
    (repo / "env.py").write_text(
        "import gymnasium as gym\n\ndef make_env(**kw):\n    return {'classic': gym.make('CartPole-v1', **kw)}\n"
    )
    for args in (
        ["init", "-q"],
        ["add", "env.py"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "env"],
    ):
        subprocess.run([git, "-C", str(repo), *args], check=True, capture_output=True)
    sha = subprocess.run(
        [git, "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    monkeypatch.setenv("RLMESH_SANDBOX_HF_ENDPOINT", str(tmp_path / "hub"))
    build = SandboxBuild(trust_remote_code=True)
    with rlmesh.numpy.SandboxEnv(
        f"hf://acme/cart@{sha}", build=build, max_episode_steps=3, connect_timeout_seconds=60
    ) as env:
        image = _docker(
            "inspect", "--format", "{{.Config.Image}}", env.sandbox.container_id
        ).stdout.strip()
        assert image.startswith("rlmesh-sandbox-acme-cart:")
        steps, _ = _episode(env)
        assert steps <= 3  # the sole suite was auto-selected and make_env got the kwargs
    _docker("rmi", image, check=False)


# -- BYO images (SBX-14, SBX-25) -----------------------------------------------------------------


def _byo(
    tmp_path: Path, base: str, tag: str, cmd: list[str], files: dict[str, str] | None = None
) -> str:
    ctx = tmp_path / tag.replace(":", "_").replace("/", "_")
    ctx.mkdir()
    lines = [f"FROM {base}", "ENTRYPOINT []", "WORKDIR /app"]
    for name, text in (files or {}).items():
        (ctx / name).write_text(text)
        lines.append(f"COPY {name} /app/{name}")
    lines.append(f"CMD {json.dumps(cmd)}")
    (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
    _docker(
        "build",
        "-q",
        "--force-rm",
        "--label",
        "rlmesh.sandbox.test=1",
        "-t",
        tag,
        str(ctx),
        timeout=600,
    )
    return tag


@pytest.fixture(scope="module")
def byo_env_image(sandbox_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tag = _byo(
        tmp_path_factory.mktemp("byo"),
        sandbox_image,
        "rlmesh-test-byo-env:1",
        ["python3", "-m", "rlmesh.serve", "--env", "CartPole-v1"],
    )
    yield tag
    _docker("rmi", "-f", tag, check=False)


def test_SBX25_a_byo_env_image_serving_on_RLMESH_ADDRESS(byo_env_image: str) -> None:
    with rlmesh.numpy.SandboxEnv(f"docker://{byo_env_image}", max_episode_steps=5) as env:
        assert env.sandbox.resolved_source == f"docker://{byo_env_image}"
        steps, truncated = _episode(env)
        assert steps <= 5  # SBX-14: the binding arrived as RLMESH_MAKE_KWARGS
    assert _ours() == []


def test_SBX14_a_byo_vector_image_gets_RLMESH_NUM_ENVS(byo_env_image: str) -> None:
    with rlmesh.numpy.SandboxVectorEnv(
        byo_env_image, 2
    ) as env:  # bare image-shaped name: local image
        assert env.num_envs == 2
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 4)


def test_SBX1_build_options_on_a_prebuilt_image_warn(byo_env_image: str) -> None:
    with (
        pytest.warns(UserWarning, match="imports"),
        rlmesh.SandboxEnv(f"docker://{byo_env_image}", build=SandboxBuild(imports=["x"])),
    ):
        pass


POLICY = """
import json, os
from rlmesh.numpy import Model
from rlmesh.serve import ModelServer

action = int(json.loads(os.environ.get("RLMESH_MAKE_KWARGS") or "{}").get("action", 0))
ModelServer(Model(lambda obs: action), os.environ.get("RLMESH_ADDRESS", "0.0.0.0:50051")).serve()
"""


@pytest.fixture(scope="module")
def byo_model_image(sandbox_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tag = _byo(
        tmp_path_factory.mktemp("byom"),
        sandbox_image,
        "rlmesh-test-byo-model:1",
        ["python3", "/app/policy.py"],
        {"policy.py": POLICY},
    )
    yield tag
    _docker("rmi", "-f", tag, check=False)


def test_SBX24_a_SandboxModel_session_owns_the_container_it_started(byo_model_image: str) -> None:
    gym = require("gymnasium")
    model = SandboxModel(f"docker://{byo_model_image}", action=1)
    assert _ours() == []  # SBX-23: construction is inert
    with model.session(gym.make("CartPole-v1")) as session:
        assert model.serving and len(_ours()) == 1
        result = session.run(seeds=[0, 1])
    assert result.num_episodes == 2 and result.total_steps > 0
    assert not model.serving and _ours() == []  # the session started it, so it stopped it


def test_SBX23_a_served_SandboxModel_outlives_its_sessions(byo_model_image: str) -> None:
    gym = require("gymnasium")
    with SandboxModel(f"image://{byo_model_image}") as model:
        cid = model.container_id
        assert model.address.startswith("tcp://127.0.0.1:")
        for seed in (0, 1):
            result = rlmesh.run(model, gym.make("CartPole-v1"), seeds=[seed])
            assert result.num_episodes == 1
        assert _ours() == [cid]
        assert model.serve() is model  # idempotent
    assert _ours() == []
    model.shutdown()  # idempotent


# -- no Docker ---------------------------------------------------------------------------------


def test_docker_cli_missing_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMESH_DOCKER", str(tmp_path / "docker"))
    with pytest.raises(DockerUnavailable, match="not on PATH"):
        rlmesh.SandboxEnv("gym://CartPole-v1", backend="docker")


def test_daemon_down_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(DockerUnavailable, match="daemon is not reachable"):
        rlmesh.SandboxEnv("gym://CartPole-v1", backend="docker")
    with pytest.raises(DockerUnavailable, match="daemon is not reachable"):
        SandboxModel("docker://repo/policy:1").serve()
