"""Round-robin over 4 CartPole endpoints with whatever ``rlmesh`` this interpreter imports.

Public API only (``rlmesh.EnvServer(env, address).serve()``, ``rlmesh.numpy.RemoteEnv``),
so the same file measures this package and a peer venv (``../shared/bench/setup_peer.sh``):

    python benchmarks/_rr_any.py [STEPS]          # prints one JSON line
    /tmp/peer/bin/python benchmarks/_rr_any.py

Servers run in 4 child processes of the same interpreter, on loopback ports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from _floor import time_rounds  # this folder is on sys.path when run as a script


def _serve(address: str) -> None:
    import gymnasium as gym

    import rlmesh

    rlmesh.EnvServer(gym.make("CartPole-v1"), address).serve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(address: str, proc: subprocess.Popen[bytes]) -> Any:
    import rlmesh.numpy as rn

    deadline = time.monotonic() + 60
    while True:
        try:
            return rn.RemoteEnv(address)
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(steps: int) -> dict[str, float]:
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(4)]
    env = {**os.environ, "RLMESH_WORKFLOW_EDITION": ""}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", a],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for a in addresses
    ]
    try:
        envs = [_connect(a, p) for a, p in zip(addresses, procs)]
        for e in envs:
            e.reset(seed=0)

        def step(k: int, action: int) -> None:
            if envs[k].step(action)[2]:
                envs[k].reset()

        single, rr = time_rounds(step, len(envs), steps)
        for e in envs:
            e.close()
        return {"step_us": single, "round_us": rr}
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    else:
        print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)))
