"""A sandboxed env with a custom space is served as it is (an opaque space).

The env's package exists only inside the sandbox, so its space class is known only
there: the client gets an opaque space whose ``sample``/``contains`` the sandbox's env
server answers with the env's own space.
"""

from __future__ import annotations

import base64
import hashlib
import os
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlmesh
from conftest import require
from rlmesh.sandbox import SandboxBuild

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOURCE = textwrap.dedent(
    """
    import gymnasium as gym
    import numpy as np


    class MissionSpace(gym.spaces.Space):
        def __init__(self):
            super().__init__(dtype=str)

        def sample(self, mask=None, probability=None):
            return "get the key"

        def contains(self, x):
            return isinstance(x, str)


    class Grid(gym.Env):
        def __init__(self):
            self.observation_space = gym.spaces.Dict(
                {"direction": gym.spaces.Discrete(4), "mission": MissionSpace()}
            )
            self.action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            return {"direction": 0, "mission": "get the key"}, {}

        def step(self, action):
            return {"direction": 0, "mission": "get the key"}, 0.0, True, False, {}


    gym.register("SbxMission-v0", entry_point="sbxmission:Grid")
    """
)


def _wheel(dest: Path) -> Path:
    files = {
        "sbxmission/__init__.py": SOURCE.encode(),
        "sbxmission-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxmission\nVersion: 0.1\n",
        "sbxmission-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return (
            "sha256="
            + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        )

    record = (
        "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items())
        + "sbxmission-0.1.dist-info/RECORD,,\n"
    )
    files["sbxmission-0.1.dist-info/RECORD"] = record.encode()
    path = dest / "sbxmission-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    require("gymnasium")
    old = {k: os.environ.get(k) for k in ("RLMESH_SANDBOX_CACHE", "RLMESH_SANDBOX_PROGRESS")}
    os.environ["RLMESH_SANDBOX_CACHE"] = str(tmp_path / "cache")
    os.environ["RLMESH_SANDBOX_PROGRESS"] = "0"
    yield tmp_path
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_a_sandboxed_custom_space_is_served_as_an_opaque_space(cache: Path) -> None:
    """The space's class exists only inside the sandbox: the client still samples and checks it."""
    build = SandboxBuild(packages=[str(_wheel(cache))], imports=["sbxmission"])
    env = rlmesh.SandboxEnv(
        "gym://SbxMission-v0", backend="venv", build=build, connect_timeout_seconds=300
    )
    try:
        mission = env.observation_space["mission"]
        assert repr(mission) == "Opaque(sbxmission.MissionSpace)"
        obs, _ = env.reset(seed=0)
        assert obs["mission"] == "get the key"
        assert mission.contains("get the key") and not mission.contains(3)
        assert mission.sample() == "get the key"
    finally:
        env.close()
