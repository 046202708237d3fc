"""Venv sandboxes under faults (issue 28 items 16-17): a flood of output, an owner killed mid-make().

The sandbox installs ``sbxfault`` (built here as a wheel): ``SbxLoud-v0`` prints
``noise_bytes`` of output per step and then a marker line; ``SbxSlowMake-v0`` writes its
pid to ``pid_file`` in ``__init__`` and then sleeps there (a stuck ``make()``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlmesh
from conftest import require
from rlmesh.sandbox import SandboxBuild, SandboxCrashed

pytestmark = pytest.mark.slow

FAULT = textwrap.dedent(
    '''
    """Envs that misbehave on purpose (sandbox fault tests)."""
    import os, sys, time
    import gymnasium as gym
    import numpy as np


    class Loud(gym.Env):
        metadata = {"render_modes": []}

        def __init__(self, noise_bytes=0):
            self.noise = noise_bytes
            self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            line = ("noise " * 20 + "\\n")
            for _ in range(self.noise // len(line)):
                sys.stdout.write(line)
            print(f"LAST-LINE step {self.t}", flush=True)
            return np.zeros(1, np.float32), 0.0, False, False, {}


    class SlowMake(Loud):
        def __init__(self, pid_file="", sleep=600):
            super().__init__()
            with open(pid_file + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(pid_file + ".tmp", pid_file)
            time.sleep(sleep)


    gym.register("SbxLoud-v0", entry_point="sbxfault:Loud")
    gym.register("SbxSlowMake-v0", entry_point="sbxfault:SlowMake")
    '''
)


def fault_wheel(dest: Path) -> Path:
    files = {
        "sbxfault/__init__.py": FAULT.encode(),
        "sbxfault-1.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxfault\nVersion: 1.0.0\n",
        "sbxfault-1.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return (
            "sha256="
            + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        )

    record = (
        "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items())
        + "sbxfault-1.0.0.dist-info/RECORD,,\n"
    )
    files["sbxfault-1.0.0.dist-info/RECORD"] = record.encode()
    path = dest / "sbxfault-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require("gymnasium")
    root = tmp_path_factory.mktemp("sbx-fault-cache")
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
def build(cache: Path) -> SandboxBuild:
    return SandboxBuild(packages=[str(fault_wheel(cache))], imports=["sbxfault"])


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def test_a_flood_of_output_uses_bounded_disk_and_the_crash_report_has_its_tail(
    cache: Path, build: SandboxBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 16: 8 MiB of output keeps at most 2 x 64 KiB on disk; the report ends with the last line."""
    cap = 64 * 1024
    monkeypatch.setenv("RLMESH_SANDBOX_LOG_BYTES", str(cap))
    env = rlmesh.numpy.SandboxEnv(
        "gym://SbxLoud-v0",
        backend="venv",
        build=build,
        noise_bytes=1 << 20,
        connect_timeout_seconds=120,
    )
    try:
        rundir = env._handle.rundir
        env.reset(seed=0)
        peak = 0
        for _ in range(8):
            env.step(0)
            peak = max(peak, _du(rundir))
        for _ in range(100):  # bounded: the keeper drains the pipe a moment after the step
            if "LAST-LINE step 8" in env._handle.logs_tail(1):
                break
            time.sleep(0.05)
        peak = max(peak, _du(rundir))
        assert peak <= 2 * cap + 64 * 1024, f"the sandbox run directory grew to {peak} bytes"
        os.kill(env._handle.proc.pid, signal.SIGKILL)
        with pytest.raises(SandboxCrashed, match="last log lines") as info:
            for _ in range(3):
                env.step(0)
        assert str(info.value).rstrip().endswith("LAST-LINE step 8")
    finally:
        env.close()


def test_the_server_stops_when_its_owner_is_killed_during_make(
    cache: Path, build: SandboxBuild, tmp_path: Path
) -> None:
    """Issue 28 item 17: kill -9 the owner while make() sleeps; the sandbox child is gone within a bound."""
    pid_file = tmp_path / "make.pid"
    code = textwrap.dedent(
        f"""
        import rlmesh
        rlmesh.SandboxEnv("gym://SbxSlowMake-v0", backend="venv", connect_timeout_seconds=600,
                          build=rlmesh.SandboxBuild(packages={list(build.packages or [])!r}, imports=["sbxfault"]),
                          pid_file={str(pid_file)!r})
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    child = None
    try:
        for _ in range(1200):  # bounded: 120 s for the venv build and the interpreter start
            if pid_file.exists() or owner.poll() is not None:
                break
            time.sleep(0.1)
        assert pid_file.exists(), (
            f"make() never started: {owner.communicate(timeout=10)[1].decode()[-2000:]}"
        )
        child = int(pid_file.read_text())
        assert not _gone(child)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        for _ in range(
            150
        ):  # bounded: 15 s (the watchdog polls every 0.2 s; SIGTERM ends a make())
            if _gone(child):
                break
            time.sleep(0.1)
        assert _gone(child), "the sandbox child outlived its owner while make() was running"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=10)
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)
