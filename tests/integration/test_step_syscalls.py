"""A served step makes the fewest system calls it can (issue 40): counted, never timed.

With busy polling off, a scalar step costs the client one ``send`` and one ``recv_into``
(``sendto``/``recvfrom``) and the server one wait for readiness (``epoll_wait``), one
``recv_into`` and one ``send``: nothing else, no timeout juggling, no second read to learn
the socket is dry. Counted with ``strace -c`` over two runs of the same session that differ
only in their number of steps (everything else, start-up, handshake, reset and close,
cancels out). The episode never ends within the steps (a balancing policy), so no reset
hides among them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import child_env, require_tool, stop_process, wait_for_ready_file

SHORT, LONG = 40, 340  # steps of the two runs; their difference is what is counted
STEPS = LONG - SHORT
SLACK = 8  # a loop wake-up on its 1 s timeout, a signal at exit: calls that are not the steps'

_CLIENT = """
import sys
import rlmesh.numpy as rn
address, steps = sys.argv[1], int(sys.argv[2])
with rn.RemoteEnv(address) as env:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(obs[2] + 0.5 * obs[3] > 0))
        assert not (terminated or truncated), "the episode ended: a reset would be counted"
"""


def _summary(path: Path) -> Counter[str]:
    """``strace -c`` output: calls per system call."""
    calls: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            calls[fields[-1]] += int(fields[3])
    return calls


def _run(strace: str, tmp: Path, steps: int) -> tuple[Counter[str], Counter[str]]:
    """One session of ``steps`` steps; the server's and the client's syscall counts."""
    env = child_env(RLMESH_BUSY_POLL_US="0")
    ready = tmp / f"ready{steps}"
    server_out, client_out = tmp / f"server{steps}.txt", tmp / f"client{steps}.txt"
    serve = [sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1"]
    serve += ["--address", "127.0.0.1:0", "--ready-file", str(ready)]
    proc = subprocess.Popen(
        [strace, "-f", "-qq", "-c", "-o", str(server_out), *serve],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = wait_for_ready_file(proc, ready, 120)
        client = [strace, "-f", "-qq", "-c", "-o", str(client_out)]
        subprocess.run(
            [*client, sys.executable, "-c", _CLIENT, address, str(steps)],
            env=env,
            check=True,
            timeout=300,
        )
    finally:
        _stop_traced(proc)
    return _summary(server_out), _summary(client_out)


def _stop_traced(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server strace runs (by its pid: SIGINT, as ``rlmesh serve`` expects); strace
    then writes its summary and exits. Falls back to stopping strace itself."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    pids = children.read_text().split() if children.exists() else []
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGINT)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        stop_process(proc)


def _per_step(short: Counter[str], long: Counter[str]) -> Counter[str]:
    out = Counter(long)
    out.subtract(short)
    return +out  # the calls the extra steps made (positive counts only)


def test_a_step_costs_three_syscalls_on_the_server_and_two_on_the_client(tmp_path: Path) -> None:
    strace = require_tool("strace", "counting system calls per step")
    server_short, client_short = _run(strace, tmp_path, SHORT)
    server_long, client_long = _run(strace, tmp_path, LONG)
    server, client = _per_step(server_short, server_long), _per_step(client_short, client_long)
    assert client["sendto"] + client["sendmsg"] == STEPS, client
    assert client["recvfrom"] + client["recvmsg"] == STEPS, client
    assert sum(client.values()) <= 2 * STEPS + SLACK, (
        f"{sum(client.values()) / STEPS:.2f} system calls per step on the client, expected 2: "
        f"{dict(client)}"
    )
    assert server["sendto"] + server["sendmsg"] == STEPS, server
    assert server["recvfrom"] + server["recvmsg"] == STEPS, server
    assert sum(server.values()) <= 3 * STEPS + SLACK, (
        f"{sum(server.values()) / STEPS:.2f} system calls per step on the server, expected 3 "
        f"(epoll_wait, recvfrom, sendto): {dict(server)}"
    )
