"""The client's own step cost with the kernel and the server taken out (issue 24).

After a few real steps against a served env (a child process), the client's socket is
swapped for a scripted one: ``send`` takes the request at once and ``recv_into`` hands
back the env's recorded reply with the request's id. What is left per step is the
client's interpreter work (encode, frame, read, check, decode, episode books), timed
over many steps: a figure that moves with the client's code, not with the scheduler.
Scalar CartPole and a 16-lane SyncVectorEnv CartPole, numpy flavour, busy polling off;
compare trees with ``benchmarks/ab_trees.py``:

    python benchmarks/ab_trees.py --a ../main/src --b src --pairs 5 -- bench_client_loop.py
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from _common import report, served

import rlmesh.numpy as rn
from rlmesh.wire import frames

LANES = 16
ACTIONS = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]


class _Recorder:
    """The real socket; keeps the bytes of the last reply read."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.last = b""

    def recv_into(self, buf: Any, *args: Any) -> int:
        n = self._sock.recv_into(buf, *args)
        self.last = bytes(memoryview(buf)[:n])
        return int(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Scripted:
    """Takes every request at once; answers each with ``reply`` under the request's id."""

    def __init__(self, sock: Any, reply: bytes) -> None:
        self._sock = sock
        self.reply = bytearray(reply)
        self.fields = list(frames.PREFIX.unpack_from(self.reply, 0))

    def _take(self, first: Any) -> None:
        rid = frames.PREFIX.unpack_from(first, 0)[3]
        self.fields[3] = rid
        frames.PREFIX.pack_into(self.reply, 0, *self.fields)

    def send(self, data: Any, *args: Any) -> int:
        self._take(data)
        return memoryview(data).nbytes

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        self._take(buffers[0])
        return sum(memoryview(b).nbytes for b in buffers)

    def recv_into(self, buf: Any, *args: Any) -> int:
        n = len(self.reply)
        buf[:n] = self.reply
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _run(client: Any, action: Any, n: int, reps: int) -> list[float]:
    conn = client._session.conn
    real = conn.sock
    recorder = conn.sock = _Recorder(real)
    for i in range(200):  # record a reply in which no episode ends (the common step)
        _obs, _rew, term, trunc, _info = client.step(action(i))
        if not np.any(term) and not np.any(trunc) and i >= 20:
            break
        if not client._vector and (term or trunc):
            client.reset()
    else:
        raise RuntimeError("no step without an episode end to record")
    assert conn.shm is None, "shared-memory rings: run with RLMESH_BUSY_POLL_US=0"
    conn.sock = _Scripted(real, recorder.last)
    try:
        out = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            for i in range(n):
                client.step(action(i))
            out.append((time.perf_counter_ns() - t0) / n / 1e3)
        return out
    finally:
        conn.sock = real


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    os.environ["RLMESH_BUSY_POLL_US"] = "0"
    with served("CartPole-v1", "tcp") as address, rn.RemoteEnv(address) as env:
        env.reset(seed=0)
        report(
            "client-only scalar CartPole step", _run(env, lambda i: i & 1, args.steps, args.reps)
        )
    with served("envs:cartpole_lanes", "tcp") as address, rn.RemoteVectorEnv(address) as venv:
        venv.reset(seed=0)
        report(
            "client-only 16-lane vector step",
            _run(venv, lambda i: ACTIONS[i & 1], args.steps, args.reps),
        )


if __name__ == "__main__":
    main()
