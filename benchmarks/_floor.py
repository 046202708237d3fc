"""The floor under the round-robin goal: CartPole over raw sockets, with no rlmesh code at all.

Four child processes each serve one ``gymnasium`` CartPole over a plain loopback TCP
socket: a request is one action byte, a reply the observation's 16 bytes plus reward and
flags; the server sleeps in ``recv``. The client sends, then polls its socket (yielding
the CPU) for up to 1 ms. This is the least work any served CartPole can do per step, so
its round / step ratio is what the machine allows: a round on 4 endpoints pays a wake-up
and a cache refill per step that a single hot endpoint does not, whatever the protocol.

    python benchmarks/_floor.py            # the ratio alone
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL_SECONDS = 0.001
_REPLY = struct.Struct("<16sd??")


def serve(port_file: str) -> None:
    """Child process: serve one CartPole until the client hangs up."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        Path(port_file + ".tmp").write_text(str(listener.getsockname()[1]))
        os.replace(port_file + ".tmp", port_file)
        conn, _ = listener.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            request = conn.recv(64)
            if not request:
                return
            obs, reward, terminated, truncated, _ = env.step(request[0])
            if terminated or truncated:
                obs, _ = env.reset()
            conn.sendall(_REPLY.pack(obs.tobytes(), reward, terminated, truncated))


def _step(sock: socket.socket, action: int) -> bytes:
    sock.send(bytes((action,)))
    end = time.perf_counter() + POLL_SECONDS
    while True:
        try:
            return sock.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            if time.perf_counter() > end:
                return sock.recv(64)
            os.sched_yield()


@contextlib.contextmanager
def endpoints(n: int) -> Iterator[list[socket.socket]]:
    """``n`` raw CartPole servers in child processes, and a connection to each."""
    with (
        tempfile.TemporaryDirectory(prefix="rlmesh-floor-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        procs = []
        for k in range(n):
            proc = subprocess.Popen([sys.executable, __file__, "--serve", f"{tmp}/port{k}"])
            stack.callback(proc.wait, 10)
            stack.callback(proc.kill)
            procs.append(proc)
        socks = []
        for k, proc in enumerate(procs):
            port_file = Path(f"{tmp}/port{k}")
            deadline = time.monotonic() + 60
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("a floor server did not start")
                time.sleep(0.02)
            sock = stack.enter_context(
                socket.create_connection(("127.0.0.1", int(port_file.read_text())))
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(sock)
        yield socks


def time_rounds(
    step: Callable[[int, int], object], endpoints: int, steps: int, reps: int = 3
) -> tuple[float, float]:
    """Median µs of one step on endpoint 0 and of one round over all ``endpoints``, interleaved.

    ``step(k, action)`` steps endpoint ``k``; ``reps`` alternations of ``steps`` single
    steps and ``steps // endpoints`` rounds, after a warm-up of each.
    """

    def one(n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            step(0, i & 1)
        return (time.perf_counter() - t0) / n * 1e6

    def rounds(n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            for k in range(endpoints):
                step(k, i & 1)
        return (time.perf_counter() - t0) / n * 1e6

    one(200)
    rounds(50)
    singles, rrs = [], []
    for _ in range(reps):
        singles.append(one(steps))
        rrs.append(rounds(max(1, steps // endpoints)))
    return statistics.median(singles), statistics.median(rrs)


def round_robin(steps: int, reps: int = 3) -> tuple[float, float]:
    """:func:`time_rounds` on 4 raw-socket CartPole servers."""
    with endpoints(4) as socks:
        return time_rounds(lambda k, a: _step(socks[k], a), 4, steps, reps)


def _send(sock: socket.socket, action: int) -> None:
    sock.send(bytes((action,)))


def _recv(sock: socket.socket) -> bytes:
    end = time.perf_counter() + POLL_SECONDS
    while True:
        try:
            return sock.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            if time.perf_counter() > end:
                return sock.recv(64)
            os.sched_yield()


def time_pairs(
    first: Callable[[int], object], second: Callable[[int], object], n: int, reps: int = 5
) -> tuple[list[float], list[float]]:
    """µs per call of ``first(i)`` and ``second(i)``: ``reps`` interleaved pairs of ``n`` calls each.

    The order alternates within pairs (A,B then B,A), after a warm-up of each.
    """

    def timed(fn: Callable[[int], object]) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        return (time.perf_counter() - t0) / n * 1e6

    for i in range(max(20, n // 10)):
        first(i)
        second(i)
    a, b = [], []
    for rep in range(reps):
        if rep % 2:
            b.append(timed(second))
            a.append(timed(first))
        else:
            a.append(timed(first))
            b.append(timed(second))
    return a, b


def fan_out(steps: int, reps: int = 5, n: int = 4) -> tuple[list[float], list[float]]:
    """The raw-socket floor of a fanned-out round: send to all ``n`` endpoints, then gather.

    Returns the per-pair µs of one step on endpoint 0 and of one round over all of them.
    """
    with endpoints(n) as socks:

        def one(i: int) -> None:
            _step(socks[0], i & 1)

        def round_(i: int) -> None:
            a = i & 1
            for sock in socks:
                _send(sock, a)
            for sock in socks:
                _recv(sock)

        return time_pairs(one, round_, steps, reps)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        single, rr = round_robin(2000)
        print(
            f"raw-socket floor: step {single:.1f} us, round {rr:.1f} us, round / step = {rr / single:.2f}x"
        )
        steps_us, rounds_us = fan_out(2000)
        one, fo = statistics.median(steps_us), statistics.median(rounds_us)
        print(
            f"raw-socket floor, fanned out: step {one:.1f} us, round {fo:.1f} us, round / step = {fo / one:.2f}x"
        )
