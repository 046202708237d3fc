"""The openpi-client test peer's own virtual environment (never rlmesh's: it pins numpy<2).

``openpi-client`` 0.1.2 pins ``numpy<2`` and imports ``typing_extensions`` without declaring
it, so it cannot live beside rlmesh's numpy 2 stack. The tests run it in a venv of its own,
built once here (``python tests/integration/openpi_bridge/peer_venv.py`` prints its interpreter;
``.ci/run`` builds it before the suite). The location is ``$RLMESH_OPENPI_PEER_DIR`` or
``~/.cache/rlmesh/openpi-client-0.1.2``; a finished build leaves a ``.ready`` stamp, and a
lock file keeps two builders from racing.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

PEER_VERSION = "0.1.2"
PEER_REQUIREMENTS = [f"openpi-client=={PEER_VERSION}", "typing_extensions"]
BUILD_TIMEOUT_SECONDS = 600


def peer_dir() -> Path:
    env = os.environ.get("RLMESH_OPENPI_PEER_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "rlmesh" / f"openpi-client-{PEER_VERSION}"


def peer_python(build: bool = True) -> Path:
    """The peer venv's interpreter, built first when missing.

    Raises:
        RuntimeError: the venv could not be built (the message says why).
    """
    root = peer_dir()
    python = root / "bin" / "python"
    if (root / ".ready").exists() and python.exists():
        return python
    if not build:
        raise RuntimeError(f"the openpi-client peer venv is not built at {root}")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / ".ready").exists() and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(root)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *PEER_REQUIREMENTS],
        ]  # fmt: skip
        for cmd in steps:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"building the openpi-client peer venv failed ({' '.join(cmd[:4])} ...): "
                    + (done.stderr or done.stdout)[-1500:]
                )
        (root / ".ready").write_text(PEER_VERSION + "\n")
    return python


if __name__ == "__main__":
    print(peer_python())
