"""Shared pieces of the benchmark scripts: serve an env in a child process, time a loop.

Every script here runs on its own (``python benchmarks/bench_scalar.py``) and under a
profiler; only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Address(str):
    """A served address that also knows the server's PID."""

    pid: int


@contextmanager
def served(
    target: str, transport: str, *extra: str, command: list[str] | None = None
) -> Iterator[Address]:
    """Serve ``target`` (``module:attr`` or a Gymnasium id) in a child process; yield its address.

    ``command``: what runs instead of ``python -m rlmesh.cli serve`` (it takes the same
    arguments).
    """
    with tempfile.TemporaryDirectory(prefix="rlmesh-bench-") as tmp:
        address = f"unix://{tmp}/env.sock" if transport == "unix" else "127.0.0.1:0"
        ready = Path(tmp) / "ready"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        env.setdefault("RLMESH_WORKFLOW_EDITION", "")
        cmd = [
            *(command or [sys.executable, "-m", "rlmesh.cli", "serve"]),
            target,
            "--address",
            address,
            "--ready-file",
            str(ready),
            *extra,
        ]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"benchmark server did not start: {cmd}")
                time.sleep(0.02)
            address = Address(ready.read_text().strip())
            address.pid = proc.pid
            yield address
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A certificate for ``127.0.0.1`` made by a fresh CA (``trustme``), written to
    ``directory``: ``(certificate chain, key, CA)`` PEM files, for ``--tls-cert``,
    ``--tls-key`` and the client's ``tls_ca=``."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    chain, key, ca_pem = (directory / n for n in ("c.pem", "k.pem", "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_pem))
    return chain, key, ca_pem


def time_loop(fn: Callable[[int], object], n: int, reps: int = 5, warmup: int = 50) -> list[float]:
    """Mean µs per call of ``fn(i)`` for each of ``reps`` repetitions of ``n`` calls."""
    for i in range(warmup):
        fn(i)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        out.append((time.perf_counter() - t0) / n * 1e6)
    return out


def report(name: str, values: list[float], unit: str = "us") -> float:
    med = statistics.median(values)
    print(
        f"{name:44s} {med:10.1f} {unit}  (min {min(values):.1f}, max {max(values):.1f}, {len(values)} reps)"
    )
    return med
