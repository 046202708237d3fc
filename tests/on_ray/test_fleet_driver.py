"""No fleet actor outlives its driver: a driver process that dies (or exits without
``close()``) takes its actors and their endpoints with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlmesh.errors import ConnectFailed
from rlmesh.transport.probe import ping

pytestmark = pytest.mark.ray

WAIT_SECONDS = 60.0

#: The child driver: joins the test's Ray, starts a fleet, reports it, then dies or returns.
DRIVER = """
import json, os, signal, sys, ray
from rlmesh.ray import EnvFleet
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, configure_logging=False)
fleet = EnvFleet("CartPole-v1", 2, lanes=2)
print(json.dumps([[i.address, i.pid] for i in fleet.info()]), flush=True)
sys.stdin.readline()                        # the test has seen the fleet serve
if sys.argv[2] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)   # no close(), no ray.shutdown(), no atexit
# "exit": return without closing the fleet
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def serves(address: str) -> bool:
    try:
        ping(address, timeout_seconds=1.0)
    except ConnectFailed:
        return False
    return True


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_the_actors_die_with_their_driver(ray_local: Any, tmp_path: Path, how: str) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    gcs = ray_local.get_runtime_context().gcs_address
    err = open(tmp_path / "driver.err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, str(script), gcs, how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()  # the driver prints once its fleet serves (or dies trying)
        assert line, (
            f"the driver died before its fleet served: {(tmp_path / 'driver.err').read_text()[-2000:]}"
        )
        actors = json.loads(line)
        assert len(actors) == 2 and all(alive(pid) and serves(address) for address, pid in actors)
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        proc.wait(timeout=WAIT_SECONDS)
        deadline = time.monotonic() + WAIT_SECONDS
        while any(alive(pid) for _, pid in actors):
            assert time.monotonic() < deadline, (
                f"fleet actors outlived their driver ({how}): {actors}"
            )
            time.sleep(0.1)
        assert not any(serves(address) for address, _ in actors)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
