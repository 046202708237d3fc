"""The step ledger's sampler and child processes (``step_ledger.py`` runs them).

Where a process's CPU goes, without slowing it down: a CPU-time profiling timer
(``SIGPROF`` every 4 ms of the process's CPU, the kernel's tick) samples the Python stack,
and each sample is charged to a *phase* of the step by the innermost frame that belongs
to the step path (a function in :func:`server_table` / :func:`client_table`). A frame in
the env's own code is charged to the env through the line of rlmesh that called it. Time
in C code (a system call, msgspec, numpy) is charged to the line that called it: CPython
runs a pending signal handler as soon as the call returns, with that frame and line.
(CPython checks for a pending signal when a call returns and when a function starts, so
a sample may land a call or two late: part of a system call's tail can show in the phase
right after it; ``/proc/<pid>/stat``'s system time says how much the kernel took in all.)
Within a few long functions of the step path, ``# ledger: <phase>`` comments in the
source mark where one phase ends and the next begins (a comment on its own line starts a
section; at the end of a code line it marks that line only); lines that make a socket
call are charged to the read or write phase by what they say.

The shares times the process's CPU per step (``/proc/<pid>/task/*/schedstat``, over the
same window) are the phases' microseconds per step. Sampling costs ~0.5 % of the CPU
(the handler's own time is measured and taken off).

Child roles, one per process (``python benchmarks/_ledger.py ROLE ...``):

- ``serve ARGS... --samples OUT``: ``rlmesh serve ARGS...`` itself; ``SIGUSR1`` starts
  sampling, ``SIGUSR2`` stops it and writes the counts to ``OUT``;
- ``drive SCENARIO ADDRESS PID STEPS OUT``: step the served env and print one JSON line:
  both processes' CPU per step, the wall time per step and both sides' phases (the
  server's read from ``OUT``), or only the wall time with ``--wall``;
- ``inproc SCENARIO STEPS [PAUSE_US]``: the same env stepped in-process (CPU and wall per
  step; with a sleep before each step, CPU only);
- ``rawserve`` / ``rawdrive SCENARIO STEPS [--poll]``: the raw-socket floor (the env behind a
  bare socket loop) and its driver.

``LEDGER_LINES=1`` adds the samples per phase and source line to ``drive``'s report.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

LANES = 16
_LINES = os.environ.get("LEDGER_LINES") == "1"
SAMPLE_SECONDS = 0.004  # the profiling timer's period (it cannot fire faster than the tick)


# -- scenarios -----------------------------------------------------------------------------


def _cartpole_actions(i: int) -> int:
    return i & 1


_LANE_ACTIONS = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]
_BOX_ACTIONS = [np.random.default_rng(7).uniform(-1, 1, 4).astype(np.float32) for _ in range(64)]


def _lane_actions(i: int) -> Any:
    return _LANE_ACTIONS[i & 1]


def _box_actions(i: int) -> Any:
    return _BOX_ACTIONS[i % 64]


def _image_actions(i: int) -> Any:
    from envs import image_action

    return image_action(i)


#: name -> (serve target, vector client, action of step i, reply payload bytes for the raw floor)
SCENARIOS: dict[str, tuple[str, bool, Callable[[int], Any], int]] = {
    "scalar": ("CartPole-v1", False, _cartpole_actions, 64),
    "box39": ("envs:Box39Env", False, _box_actions, 512),
    "image": ("envs:ImageEnv", False, _image_actions, 150_592),
    "lanes16": ("envs:cartpole_lanes", True, _lane_actions, 256),
    "metaworld": ("envs:metaworld_reach", False, _box_actions, 512),
}


def make_env(scenario: str) -> Any:
    """The scenario's env, built in this process as ``rlmesh serve`` builds it."""
    try:
        from rlmesh._spawn.recipe import load_env_target
    except ImportError:  # a tree from before rlmesh._spawn (the ledger compares trees)
        from rlmesh.serve._command import load_env_target  # type: ignore[attr-defined,no-redef]

    env, _factory = load_env_target(SCENARIOS[scenario][0])
    return env


# -- the sampler -----------------------------------------------------------------------------

_MARK = re.compile(r"#\s*ledger:\s*([a-z]+)")
_READ = re.compile(r"recv_into\(|os\.readv\(")
_WRITE = re.compile(r"sock\.send\(|sock\.sendmsg\(")

#: phase key -> label, per side (the keys are what ``# ledger:`` comments name)
SERVER_PHASES = {
    "read": "read: recv syscall",
    "parse": "parse: frame, header, state",
    "action": "action: decode, checks",
    "env": "env step",
    "observation": "observation: result, checks, encode, info",
    "reply": "reply: header encode, frame layout",
    "write": "write: send syscall",
    "wait": "wait and wake: epoll",
    "books": "loop, dispatch, episode books",
}
CLIENT_PHASES = {
    "action": "action: encode, checks",
    "request": "request: header encode, frame layout",
    "write": "write: send syscall",
    "read": "wait and read: recv syscall",
    "parse": "parse: frame, header, state",
    "observation": "observation: decode, info, episode books",
    "call": "call: step and request bodies",
    "bench": "(the benchmark's own loop)",
}


def _table(fns: list[tuple[Any, str, str]]) -> dict[CodeType, tuple[str, dict[int, str]]]:
    """``{code: (default phase, {line: phase})}`` for ``(owner, function name, phase)``;
    a name the tree lacks (an older or newer checkout) is skipped."""
    out = {}
    for owner, name, phase in fns:
        fn = getattr(owner, name, None)
        code = getattr(fn, "__code__", None)
        if code is not None:
            out[code] = _line_phases(fn, phase)
    return out


def _line_phases(fn: Any, default: str) -> tuple[str, dict[int, str]]:
    """``fn``'s default phase and the lines whose phase differs (markers, socket calls)."""
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return default, {}
    out: dict[int, str] = {}
    section = default
    for n, text in enumerate(lines, first):
        mark = _MARK.search(text)
        stripped = text.strip()
        if mark and stripped.startswith("#"):
            section = mark.group(1)
            continue
        phase = mark.group(1) if mark else section
        if _READ.search(text):
            phase = "read"
        elif _WRITE.search(text):
            phase = "write"
        if phase != default:
            out[n] = phase
    return default, out


def server_table() -> dict[CodeType, tuple[str, dict[int, str]]]:
    from rlmesh._envkit.checks import Checks
    from rlmesh.serve import _driven, _driver, _loop
    from rlmesh.transport import stream
    from rlmesh.transport.connection import Connection
    from rlmesh.transport.reactor import Poller
    from rlmesh.wire import session as ws

    fns: list[tuple[Any, str, str]] = [
        (Poller, "poll", "wait"),
        (_loop.ServeLoop, "run", "books"),
        (_loop.ServeLoop, "_readable", "books"),
        (_loop.ServeLoop, "_road", "books"),
        (_loop.ServeLoop, "_post", "write"),
        (Connection, "recv_frame", "parse"),
        (stream.SocketStream, "_recv_socket", "parse"),
        (stream.SocketStream, "_recv_rest", "parse"),
        (stream.SocketStream, "_fill", "parse"),
        (stream.SocketStream, "_whole", "parse"),
        (ws._ServerSession, "receive", "parse"),
        (_driver.Driver, "step", "books"),
        (_driver.Driver, "_decode_action", "action"),
        (_driver.Driver, "_info", "observation"),
        (Checks, "observation", "observation"),
        (_driven.DrivenScalar, "step", "observation"),
        (_driven.DrivenVector, "step", "observation"),
        (ws._ServerSession, "send", "reply"),
        (Connection, "post", "write"),
        (stream.SocketStream, "_post_socket", "write"),
        (stream.SocketStream, "_send_socket", "write"),
    ]
    return _table(fns)


def server_resets() -> set[CodeType]:
    """Requests other than a step (a reset's, mostly) go through the general dispatch."""
    from rlmesh.serve import _loop

    return {fn.__code__ for fn in (getattr(_loop.ServeLoop, "_dispatch", None),) if fn is not None}


def client_resets() -> set[CodeType]:
    from rlmesh.client import _env

    return {fn.__code__ for fn in (_env.RemoteEnv.reset, _env.RemoteVectorEnv.reset)}


def client_table() -> dict[CodeType, tuple[str, dict[int, str]]]:
    from rlmesh.client import _env, _session
    from rlmesh.transport import stream
    from rlmesh.transport.connection import Connection
    from rlmesh.wire import session as ws

    fns: list[tuple[Any, str, str]] = [
        (sys.modules[__name__], "drive", "bench"),
        (_env._RemoteEnvBase, "step", "call"),
        (_env._RemoteEnvBase, "_step_result", "observation"),
        (_session.ClientSession, "call", "call"),
        (_session.ClientSession, "_transmit", "write"),
        (_session.ClientSession, "_await_reply", "parse"),
        (ws._ClientSession, "send", "request"),
        (ws._ClientSession, "receive", "parse"),
        (Connection, "recv_frame", "parse"),
        (Connection, "send", "write"),
        (stream.SocketStream, "_send_socket", "write"),
        (stream.SocketStream, "_recv_socket", "parse"),
        (stream.SocketStream, "_recv_rest", "parse"),
        (stream.SocketStream, "_fill", "parse"),
        (stream.SocketStream, "_poll", "read"),
        (stream.SocketStream, "_whole", "parse"),
    ]
    return _table(fns)


class Sampler:
    """Counts CPU-time samples per phase while armed (main thread only)."""

    def __init__(
        self, table: dict[CodeType, tuple[str, dict[int, str]]], resets: set[CodeType]
    ) -> None:
        self.table = table
        self.resets = resets  # a frame of one of these on the stack: the sample is a reset's
        self.counts: Counter[str] = Counter()
        self.lines: Counter[str] = Counter()  # with LEDGER_LINES=1: samples per phase and line
        self.handler_ns = 0
        signal.signal(signal.SIGPROF, self._sample)

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        t0 = time.thread_time_ns()
        table, resets = self.table, self.resets
        phase = ""
        f = frame
        while f is not None:
            code = f.f_code
            if code in resets:
                phase = "reset"
                break
            if not phase:
                entry = table.get(code)
                if entry is not None:
                    phase = entry[1].get(f.f_lineno, entry[0])
            f = f.f_back
        self.counts[phase or "other"] += 1
        if _LINES:
            where = frame.f_code.co_filename.rsplit("/", 2)[-1] if frame else "?"
            self.lines[f"{phase or 'other'} {where}:{frame.f_lineno if frame else 0}"] += 1
        self.handler_ns += time.thread_time_ns() - t0

    def start(self) -> None:
        self.counts.clear()
        self.handler_ns = 0
        signal.setitimer(signal.ITIMER_PROF, SAMPLE_SECONDS, SAMPLE_SECONDS)

    def stop(self) -> dict[str, Any]:
        signal.setitimer(signal.ITIMER_PROF, 0)
        out = {"counts": dict(self.counts), "handler_ns": self.handler_ns}
        if _LINES:
            out["lines"] = dict(self.lines.most_common(40))
        return out


def process_cpu_ns(pid: int | str = "self") -> int:
    """CPU nanoseconds of every thread of ``pid`` so far (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that just ended
    return total


def kernel_ns(pid: int | str = "self") -> int:
    """System (kernel) CPU of ``pid`` so far, from ``/proc/<pid>/stat`` (clock ticks: coarse,
    so read it over many steps)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def phases_per_step(sampled: dict[str, Any], cpu_ns: int, steps: int) -> dict[str, float]:
    """µs per step of each phase: its share of the samples times the window's CPU.

    Resets inside the window are sampled too (their share is reported and left out of the
    step), as is the sampler's own handler time.
    """
    counts = sampled["counts"]
    total = sum(counts.values())
    cpu = cpu_ns - sampled["handler_ns"]
    if not total:
        return {}
    out = {k: v / total * cpu / steps / 1e3 for k, v in counts.items()}
    out["samples"] = float(total)
    return out


# -- the child roles -----------------------------------------------------------------------


def serve(argv: list[str]) -> int:
    """``rlmesh serve ARGV``, sampled between ``SIGUSR1`` and ``SIGUSR2`` (``--samples OUT``)."""
    at = argv.index("--samples")
    out = argv[at + 1]
    argv = argv[:at] + argv[at + 2 :]
    sampler = Sampler(server_table(), server_resets())

    def arm(signum: int, frame: Any) -> None:
        sampler.start()

    def disarm(signum: int, frame: Any) -> None:
        tmp = out + ".tmp"
        Path(tmp).write_text(json.dumps(sampler.stop()))
        os.replace(tmp, out)

    signal.signal(signal.SIGUSR1, arm)
    signal.signal(signal.SIGUSR2, disarm)
    from rlmesh._cli.serve import main

    return main(argv)


def drive(
    scenario: str, address: str, pid: int, steps: int, out: str, wall_only: bool
) -> dict[str, Any]:
    import rlmesh.numpy as rn

    sampler = None if wall_only else Sampler(client_table(), client_resets())
    _target, vector, action, _size = SCENARIOS[scenario]
    cls = rn.RemoteVectorEnv if vector else rn.RemoteEnv
    warmup = max(200, steps // 20)
    actions = [action(i) for i in range(steps + warmup)]
    with cls(address) as env:
        env.reset(seed=0)
        for i in range(warmup):
            result = env.step(actions[i])
            if not vector and (result[2] or result[3]):
                env.reset()
        if sampler is not None:
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.05)
            sampler.start()
        k0, j0 = kernel_ns(pid), kernel_ns()
        s0, c0, w0 = process_cpu_ns(pid), process_cpu_ns(), time.perf_counter_ns()
        resets = 0
        for i in range(warmup, warmup + steps):
            result = env.step(actions[i])
            if not vector and (result[2] or result[3]):
                env.reset()
                resets += 1
        w1, c1, s1 = time.perf_counter_ns(), process_cpu_ns(), process_cpu_ns(pid)
        k1, j1 = kernel_ns(pid), kernel_ns()
        ours = sampler.stop() if sampler is not None else None
    report: dict[str, Any] = {
        "wall": (w1 - w0) / steps / 1e3,
        "resets": resets,
        "server_kernel": (k1 - k0) / steps / 1e3,
        "client_kernel": (j1 - j0) / steps / 1e3,
    }
    if ours is None:
        return report
    if os.path.exists(out):
        os.unlink(out)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not os.path.exists(out):
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not write its samples")
        time.sleep(0.01)
    theirs = json.loads(Path(out).read_text())
    server = phases_per_step(theirs, s1 - s0, steps)
    client = phases_per_step(ours, c1 - c0, steps)
    report["server_phases"] = server
    report["client_phases"] = client
    if _LINES:
        report["server_lines"], report["client_lines"] = theirs["lines"], ours["lines"]
    # CPU per step, resets and the sampler left out
    report["server_cpu"] = (s1 - s0 - theirs["handler_ns"]) / steps / 1e3 - server.get("reset", 0)
    report["client_cpu"] = (c1 - c0 - ours["handler_ns"]) / steps / 1e3 - client.get("reset", 0)
    return report


def inproc(scenario: str, steps: int, pause_us: float = 0.0) -> dict[str, Any]:
    """The scenario's env stepped in this process: CPU and wall per ``env.step``, resets apart.

    With ``pause_us`` the process sleeps that long before each step, as a served env's
    process does between requests: the CPU the env's step then costs (caches gone cold
    while it slept) is what any served env pays, whatever the protocol.
    """
    env = make_env(scenario)
    vector = SCENARIOS[scenario][1]
    action = SCENARIOS[scenario][2]
    actions = [action(i) for i in range(steps + 200)]
    env.reset(seed=0)
    for i in range(200):
        result = env.step(actions[i])
        if not vector and (result[2] or result[3]):
            env.reset()
    step, reset = env.step, env.reset
    cpu = wall = 0
    cpu_clock, wall_clock = time.thread_time_ns, time.perf_counter_ns
    if pause_us:
        sleep, pause = time.sleep, pause_us / 1e6
        for i in range(200, 200 + steps):
            sleep(pause)
            c0 = cpu_clock()
            result = step(actions[i])
            cpu += cpu_clock() - c0
            if not vector and (result[2] or result[3]):
                reset()
        return {"cpu": cpu / steps / 1e3}
    c0, w0 = cpu_clock(), wall_clock()
    for i in range(200, 200 + steps):
        result = step(actions[i])
        if not vector and (result[2] or result[3]):
            c1, w1 = cpu_clock(), wall_clock()
            reset()
            cpu -= cpu_clock() - c1
            wall -= wall_clock() - w1
    cpu += cpu_clock() - c0
    wall += wall_clock() - w0
    return {"cpu": cpu / steps / 1e3, "wall": wall / steps / 1e3}


# -- the raw floor: the least any Python server and client of this env can do ----------------


def _leaves(value: Any) -> list[Any]:
    """A value's arrays (and ints) in order: a Dict's values, a Tuple's items, or itself."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.ascontiguousarray(value)]


def raw_serve(scenario: str, port_file: str) -> None:
    """Serve the scenario's env over a plain TCP socket: per step one ``recv_into`` of the
    action's bytes, ``env.step``, one ``sendmsg`` of the observation's bytes, the reward,
    the flags and the info's floats. No framing, no checks, no books: the floor."""
    import socket
    import struct

    env = make_env(scenario)
    obs, _ = env.reset(seed=0)
    probe = np.asarray(SCENARIOS[scenario][2](0))
    request = bytearray(probe.nbytes)
    view = memoryview(request)
    vector = SCENARIOS[scenario][1]
    discrete = probe.ndim == 0 and probe.dtype.kind in "iu" and not vector

    def reply_of(obs: Any, reward: Any, term: Any, trunc: Any, info: Any) -> list[Any]:
        floats = [v for v in info.values() if type(v) is float]
        tail = struct.pack(
            f"<d??{len(floats)}d",
            float(np.sum(reward)),
            bool(np.any(term)),
            bool(np.any(trunc)),
            *floats,
        )
        return [*_leaves(obs), tail]

    size = sum(
        memoryview(b).nbytes for b in reply_of(*env.step(probe if not discrete else int(probe)))
    )
    env.reset(seed=0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        Path(port_file + ".tmp").write_text(str(listener.getsockname()[1]))
        os.replace(port_file + ".tmp", port_file)
        conn, _ = listener.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(struct.pack("<Q", size))
        dtype = probe.dtype
        while True:
            got = 0
            while got < len(request):
                n = conn.recv_into(view[got:])
                if not n:
                    return
                got += n
            action = (
                int.from_bytes(request, "little")
                if discrete
                else np.frombuffer(request, dtype).reshape(probe.shape)
            )
            obs, reward, term, trunc, info = env.step(action)
            if not vector and (term or trunc):
                obs, _ = env.reset()
            conn.sendmsg(reply_of(obs, reward, term, trunc, info))


def raw_drive(scenario: str, steps: int, poll: bool) -> dict[str, Any]:
    """Step :func:`raw_serve` in a child process; CPU per step of both, and the wall time."""
    import socket
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rlmesh-raw-") as tmp:
        port_file = f"{tmp}/port"
        proc = subprocess.Popen([sys.executable, __file__, "rawserve", scenario, port_file])
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the raw floor server did not start")
                time.sleep(0.02)
            sock = socket.create_connection(("127.0.0.1", int(Path(port_file).read_text())))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            size = int.from_bytes(sock.recv(8, socket.MSG_WAITALL), "little")
            buf = bytearray(size)
            view = memoryview(buf)
            action = SCENARIOS[scenario][2]
            requests = [np.asarray(action(i)).tobytes() for i in range(64)]
            dontwait = socket.MSG_DONTWAIT

            def step(i: int) -> None:
                sock.send(requests[i & 63])
                got = 0
                if poll:  # as rlmesh's client polls: up to 1 ms, yielding the CPU
                    end = time.perf_counter() + 0.001
                    while True:
                        try:
                            got = sock.recv_into(view, 0, dontwait)
                            break
                        except BlockingIOError:
                            if time.perf_counter() > end:
                                break
                            os.sched_yield()
                while got < size:
                    got += sock.recv_into(view[got:])

            for i in range(max(200, steps // 20)):
                step(i)
            s0, c0, w0 = process_cpu_ns(proc.pid), process_cpu_ns(), time.perf_counter_ns()
            for i in range(steps):
                step(i)
            w1, c1, s1 = time.perf_counter_ns(), process_cpu_ns(), process_cpu_ns(proc.pid)
            sock.close()
        finally:
            proc.kill()
            proc.wait()
    return {
        "server_cpu": (s1 - s0) / steps / 1e3,
        "client_cpu": (c1 - c0) / steps / 1e3,
        "wall": (w1 - w0) / steps / 1e3,
    }


def main(argv: list[str]) -> int:
    role = argv[0]
    if role == "serve":
        return serve(argv[1:])
    if role == "drive":
        out = drive(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5], "--wall" in argv)
    elif role == "inproc":
        out = inproc(argv[1], int(argv[2]), float(argv[3]) if len(argv) > 3 else 0.0)
    elif role == "rawserve":
        raw_serve(argv[1], argv[2])
        return 0
    elif role == "rawdrive":
        out = raw_drive(argv[1], int(argv[2]), "--poll" in argv)
    else:
        raise SystemExit(f"unknown role {role!r}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
