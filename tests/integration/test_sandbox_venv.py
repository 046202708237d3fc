"""The venv backend end to end: a sandboxed env whose dependency the host does not have.

The sandbox installs ``sbxdemo`` (a tiny package built here as a wheel, absent from
the host venv) next to rlmesh and gymnasium; gymnasium and its dependencies come
from the package index pip/uv is configured with (PyPI in CI).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlmesh
from conftest import require, require_tool, wait_gone
from rlmesh.errors import AuthenticationFailed
from rlmesh.sandbox import SandboxBuild, SandboxBuildError, SandboxCrashed, SandboxStartError
from rlmesh.transport import shm
from sandbox_demo import demo_wheel as _wheel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require("gymnasium")
    root = tmp_path_factory.mktemp("sbx-cache")
    old = {k: os.environ.get(k) for k in ("RLMESH_SANDBOX_CACHE", "RLMESH_SANDBOX_PROGRESS")}
    os.environ["RLMESH_SANDBOX_CACHE"] = str(root)
    os.environ["RLMESH_SANDBOX_PROGRESS"] = "0"
    yield root
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def demo_build(cache: Path) -> SandboxBuild:
    return SandboxBuild(packages=[str(_wheel(cache))], imports=["sbxdemo"])


def _venvs(cache: Path) -> list[str]:
    root = cache / "venv"
    return (
        sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if root.exists()
        else []
    )


def test_the_host_does_not_have_the_sandboxed_dependency() -> None:
    assert importlib.util.find_spec("sbxdemo") is None


def test_venv_backend_runs_an_env_whose_dependency_the_host_lacks(
    cache: Path, demo_build: SandboxBuild
) -> None:
    with rlmesh.numpy.SandboxEnv(
        "gym://SbxDemo-v0", backend="venv", build=demo_build, level=3, connect_timeout_seconds=120
    ) as env:
        info = env.sandbox
        assert (info.backend, info.container_id) == ("venv", None)
        assert info.address.startswith("unix://") and env.address == info.address
        obs, reset_info = env.reset(seed=0)
        assert reset_info["sbxdemo"] == "7.3.1"  # reported by the package only the sandbox has
        # the sandbox's server requires the sandbox's own token: another client is refused
        with pytest.raises(AuthenticationFailed):
            rlmesh.numpy.RemoteEnv(info.address)
        assert obs.tolist() == pytest.approx([7.31, 3.0])  # level=3 reached make()
        steps = 0
        truncated = False
        while not truncated:
            obs, reward, terminated, truncated, _ = env.step(1)
            steps += 1
        assert steps == 5 and reward == 1.0
        if shm.shm_supported() and env._session.conn.busy_poll:
            assert (
                env._session.conn.shm is not None
            )  # the unix socket keeps the shared-memory fast path
    assert len(_venvs(cache)) == 1


def test_a_warm_start_reuses_the_cached_venv(cache: Path, demo_build: SandboxBuild) -> None:
    before = _venvs(cache)
    log = next((cache / "venv").glob("*.build.log"))
    stamp = log.stat().st_mtime_ns
    with rlmesh.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=demo_build, level=1) as env:
        env.reset()
    assert _venvs(cache) == before and log.stat().st_mtime_ns == stamp  # nothing was rebuilt


def test_vector_lanes_share_one_server(cache: Path, demo_build: SandboxBuild) -> None:
    with rlmesh.numpy.SandboxVectorEnv(
        "gym://SbxDemo-v0", 3, backend="venv", build=demo_build
    ) as env:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 2) and env.num_envs == 3
        obs, rewards, _, _, _ = env.step([0, 1, 1])
        assert rewards.tolist() == [0.0, 1.0, 1.0]
        pid = env._handle.proc.pid
        assert [p.pid for p in [env._handle.proc]] == [pid]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # close() stopped (and reaped) the child server


def test_a_failing_make_reports_the_server_log_tail(cache: Path, demo_build: SandboxBuild) -> None:
    with pytest.raises(SandboxStartError, match="exited") as info:
        rlmesh.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=demo_build, no_such_kwarg=1)
    assert "no_such_kwarg" in str(info.value)


def test_a_crashed_server_is_reported_with_its_last_log_lines(
    cache: Path, demo_build: SandboxBuild
) -> None:
    env = rlmesh.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=demo_build)
    try:
        env.reset()
        os.kill(env._handle.proc.pid, signal.SIGKILL)
        with pytest.raises(SandboxCrashed, match="last log lines") as info:
            for _ in range(3):
                env.step(0)
        assert "RLMesh sandbox serving" in str(info.value)
    finally:
        env.close()


def test_the_server_stops_when_its_owner_dies(cache: Path, demo_build: SandboxBuild) -> None:
    code = textwrap.dedent(
        f"""
        import os, rlmesh
        env = rlmesh.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=rlmesh.SandboxBuild(packages={list(demo_build.packages or [])!r}, imports=["sbxdemo"]))
        print(env._handle.proc.pid, env._handle.rundir, flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        check=True,
    )
    pid_text, rundir = out.stdout.strip().splitlines()[-1].split(" ", 1)
    pid = int(pid_text)
    assert wait_gone([pid], within=20) == [], "the orphaned env server outlived its owner"
    assert not Path(rundir).exists()  # it cleaned up its socket directory itself


def test_a_failed_install_is_reported_and_leaves_no_venv(cache: Path) -> None:
    before = _venvs(cache)
    bad = SandboxBuild(packages=[str(cache / "missing-1.0-py3-none-any.whl")])
    with pytest.raises(SandboxBuildError, match="installing the sandbox packages failed") as info:
        rlmesh.SandboxEnv("gym://CartPole-v1", backend="venv", build=bad)
    assert "missing-1.0-py3-none-any.whl" in str(info.value)
    assert _venvs(cache) == before


def test_hf_source_from_a_pinned_git_repository(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SBX-10 offline: ``$RLMESH_SANDBOX_HF_ENDPOINT`` points at a directory of git repositories."""
    git = require_tool("git")
    repo = tmp_path / "hub" / "acme" / "demo-envs"
    repo.mkdir(parents=True)
    (repo / "env.py").write_text(
        "import gymnasium as gym\n\n"
        "def make_env(**kwargs):\n"
        "    return {'classic': {'cart': gym.make('CartPole-v1', **kwargs), 'pend': gym.make('Pendulum-v1')}}\n"
    )

    def run(*a: str) -> Any:
        return subprocess.run(
            [git, "-C", str(repo), *a], check=True, capture_output=True, text=True
        )

    run("init", "-q")
    (repo / "requirements.txt").write_text(
        f"{_wheel(tmp_path)}\n"
    )  # installed from the repo's own pins
    (repo / "env.py").write_text(
        (repo / "env.py")
        .read_text()
        .replace("import gymnasium as gym\n", "import gymnasium as gym\nimport sbxdemo\n")
    )
    run("add", "env.py", "requirements.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "env")
    run("tag", "v1")
    sha = run("rev-parse", "HEAD").stdout.strip()
    monkeypatch.setenv("RLMESH_SANDBOX_HF_ENDPOINT", str(tmp_path / "hub"))
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        rlmesh.SandboxEnv(f"hf://acme/demo-envs@{sha}:classic/cart", backend="venv")
    with pytest.raises(ValueError, match="full 40-hex commit SHA"):
        rlmesh.SandboxEnv(
            "hf://acme/demo-envs@v1:classic/cart",
            backend="venv",
            build=SandboxBuild(trust_remote_code=True),
        )
    trusted = SandboxBuild(trust_remote_code=True, allow_unpinned_hf=True)
    with rlmesh.numpy.SandboxEnv(
        "hf://acme/demo-envs@v1:classic/cart", backend="venv", build=trusted, max_episode_steps=3
    ) as env:
        assert (
            env.sandbox.resolved_source == f"hf://acme/demo-envs@{sha}:classic/cart"
        )  # the tag resolved to its commit
        env.reset(seed=0)
        for _ in range(3):
            *_, terminated, truncated, _ = env.step(0)
        assert truncated or terminated
    with pytest.raises(SandboxStartError, match="several tasks"):
        rlmesh.SandboxEnv(
            f"hf://acme/demo-envs@{sha}:classic",
            backend="venv",
            build=SandboxBuild(trust_remote_code=True),
        )


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_each_installer_builds_a_working_venv(
    installer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``uv`` when available, else ``python -m venv`` + pip; ``RLMESH_SANDBOX_INSTALLER`` forces one."""
    if installer == "uv":
        require("uv", "the fast venv installer of the sandbox extra")
    monkeypatch.setenv("RLMESH_SANDBOX_CACHE", str(tmp_path))
    monkeypatch.setenv("RLMESH_SANDBOX_INSTALLER", installer)
    with rlmesh.SandboxEnv("CartPole-v1", backend="venv", connect_timeout_seconds=120) as env:
        env.reset(seed=0)
        env.step(0)
    log = next((tmp_path / "venv").glob("*.build.log")).read_text()
    assert ("uv venv" in log) == (installer == "uv") and ("-m venv" in log) == (installer == "pip")


@pytest.mark.parametrize("flavour", ["torch", "jax"])
def test_the_torch_and_jax_flavours_have_sandboxed_clients(
    cache: Path, demo_build: SandboxBuild, flavour: str
) -> None:
    """api-surface A.3/A.4: ``rlmesh.torch.SandboxEnv`` / ``rlmesh.jax.SandboxEnv`` decode to that framework."""
    require(flavour)
    mod = getattr(rlmesh, flavour)
    with mod.SandboxEnv(
        "gym://SbxDemo-v0", backend="venv", build=demo_build, level=3, connect_timeout_seconds=120
    ) as env:
        obs, _ = env.reset(seed=0)
        assert type(obs).__module__.split(".")[0] in ("torch", "jax", "jaxlib")
        assert [round(float(x), 2) for x in obs.tolist()] == [7.31, 3.0]
    with mod.SandboxVectorEnv(
        "gym://SbxDemo-v0", backend="venv", build=demo_build, num_envs=2, level=1
    ) as venv:
        obs, _ = venv.reset(seed=0)
        assert tuple(obs.shape) == (2, 2) and type(obs).__module__.split(".")[0] in (
            "torch",
            "jax",
            "jaxlib",
        )
