"""A sandboxed env with a custom space: the user sees the refusal, not a bare "exited" (issue 29 item 4).

The env's package exists only inside the sandbox, so its spaces are known only once the
sandbox's env server makes it; the server refuses before it binds and the
``SandboxStartError`` carries the one-line ``UnsupportedSpace`` report from its log.
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
from rlmesh.sandbox import SandboxBuild, SandboxStartError

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


def test_a_sandboxed_custom_space_is_refused_with_the_space_named(cache: Path) -> None:
    build = SandboxBuild(packages=[str(_wheel(cache))], imports=["sbxmission"])
    with pytest.raises(SandboxStartError) as info:
        rlmesh.SandboxEnv(
            "gym://SbxMission-v0", backend="venv", build=build, connect_timeout_seconds=300
        )
    text = str(info.value)
    assert (
        "UnsupportedSpace: Unsupported space type: MissionSpace at observation_space['mission']"
        in text
    )
    assert "gymnasium.ObservationWrapper" in text
