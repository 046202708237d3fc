"""A tiny package only sandboxes have (``sbxdemo``), as a wheel built without a build backend.

It registers the Gymnasium id ``SbxDemo-v0``: observations ``[7.31, level + t]``, reward =
action, truncated after 5 steps, and ``info["sbxdemo"]`` = its version on reset.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
import zipfile
from pathlib import Path

DEMO = textwrap.dedent(
    '''
    """A package only the sandbox has."""
    import gymnasium as gym
    import numpy as np

    __version__ = "7.3.1"


    class Demo(gym.Env):
        metadata = {"render_modes": []}

        def __init__(self, level=1):
            self.level = level
            self.observation_space = gym.spaces.Box(-100, 100, (2,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.array([7.31, self.level], np.float32), {"sbxdemo": __version__}

        def step(self, action):
            self.t += 1
            obs = np.array([7.31, self.level + self.t], np.float32)
            return obs, float(action), False, self.t >= 5, {}


    gym.register("SbxDemo-v0", entry_point="sbxdemo:Demo")
    '''
)


def demo_wheel(dest: Path) -> Path:
    """A minimal ``sbxdemo-7.3.1-py3-none-any.whl`` (no build backend, no network)."""
    files = {
        "sbxdemo/__init__.py": DEMO.encode(),
        "sbxdemo-7.3.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxdemo\nVersion: 7.3.1\n",
        "sbxdemo-7.3.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return (
            "sha256="
            + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        )

    record = (
        "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items())
        + "sbxdemo-7.3.1.dist-info/RECORD,,\n"
    )
    files["sbxdemo-7.3.1.dist-info/RECORD"] = record.encode()
    path = dest / "sbxdemo-7.3.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path
