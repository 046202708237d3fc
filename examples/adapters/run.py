"""Serve the tagged ReachEnv over TCP and evaluate the spec'd policy against it: no glue code.

python examples/adapters/run.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rlmesh.adapters as adapt
from rlmesh.numpy import Model, RemoteEnv
from rlmesh.serve import wait_ready

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from policy import SPEC, predict  # noqa: E402


def serve_in_background(ready: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    env.setdefault("RLMESH_WORKFLOW_EDITION", "")
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        "reach_env:make_env",
        "--address",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]
    return subprocess.Popen(cmd, env=env)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "address"
        server = serve_in_background(ready)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the env server did not start")
                time.sleep(0.05)
            address = ready.read_text().strip()
            wait_ready(address)

            with RemoteEnv(address) as env:  # what the env publishes, and the glue rlmesh derives
                adapter = adapt.resolve_from_contract(env.env_contract, SPEC)
                print(adapter.describe())

            result = Model(predict, spec=SPEC).run(address, seeds=[0, 1, 2, 3, 4])
            for ep in result.episodes:
                print(
                    f"episode {ep.index}: steps={ep.steps} reward={ep.reward:.2f} success={ep.success}"
                )
            print(f"success rate {result.success_rate:.0%} over {result.num_episodes} episodes")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
