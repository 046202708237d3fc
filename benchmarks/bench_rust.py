"""The Rust CartPole server (rust/examples/cartpole.rs) against the Python-served CartPole, same run.

For each transport: a Python client (``rlmesh.numpy.RemoteEnv``) stepping the Python-served
CartPole-v1 and the Rust-served CartPole; the Rust client (``rust/examples/drive.rs``)
stepping both; and the Rust server's own side of a step (``ServerStats``: from a request's
last byte read to its reply's last byte written, printed by the example on exit). Goal
(issue 17): the Rust server's side of a step <= 5 µs, so the whole step is bound by the
Python client. Only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from _common import report, served, time_loop

import rlmesh.numpy as rn

ROOT = Path(__file__).resolve().parents[1]
RUST = ROOT / "rust"
EXAMPLES = RUST / "target" / "release" / "examples"


def build() -> None:
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    subprocess.run([cargo, "build", "--release", "--offline", "--examples"], cwd=RUST, check=True)


class RustServer:
    """The Rust CartPole in a child process; on stop it reports its server-side ns per request."""

    def __init__(self, transport: str, tmp: str) -> None:
        address = f"unix://{tmp}/rust.sock" if transport == "unix" else "127.0.0.1:0"
        env = {**os.environ, "RLMESH_ALLOW_REMOTE_SHUTDOWN": "1"}
        self.proc = subprocess.Popen(
            [str(EXAMPLES / "cartpole"), address],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()

    def stop(self) -> tuple[float, float] | None:
        """Shut the server down; its mean server-side ns per request, total and before the send."""
        with rn.RemoteEnv(self.address) as env:
            env.shutdown("benchmark over")
        _, err = self.proc.communicate(timeout=30)
        m = re.search(r"mean (\d+) ns per request \((\d+) ns before the send syscall\)", err)
        return (float(m.group(1)), float(m.group(2))) if m else None


def python_client_us(address: str, n: int) -> float:
    with rn.RemoteEnv(address) as env:
        env.reset(seed=0)

        def step(i: int) -> None:
            _, _, terminated, truncated, _ = env.step(i & 1)
            if terminated or truncated:
                env.reset()

        return report(f"  python client, {n} steps", time_loop(step, n, reps=3))


def rust_client_us(address: str, n: int) -> float:
    values = []
    for _ in range(3):
        out = subprocess.run(
            [str(EXAMPLES / "drive"), address, "--bench", str(n)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        m = re.search(r"mean_ns (\d+)", out.stdout)
        if m is None:
            raise RuntimeError(f"drive --bench failed: {out.stderr}")
        values.append(int(m.group(1)) / 1000)
    return report(f"  rust client, {n} steps", values)


def bench(transport: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    print(f"-- {transport}: Python-served CartPole-v1")
    with served("CartPole-v1", transport) as address:
        out["py_client_py_server_us"] = python_client_us(address, n)
        out["rust_client_py_server_us"] = rust_client_us(address, n)
    print(f"-- {transport}: Rust-served CartPole (rust/examples/cartpole.rs)")
    with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp:
        server = RustServer(transport, tmp)
        try:
            out["py_client_rust_server_us"] = python_client_us(server.address, n)
            out["rust_client_rust_server_us"] = rust_client_us(server.address, n * 5)
        finally:
            server_ns = server.stop()
    if server_ns is not None:
        out["rust_server_side_us"] = server_ns[0] / 1000
        out["rust_server_before_send_us"] = server_ns[1] / 1000
        print(f"  {'rust server side of a request (mean)':42s} {server_ns[0] / 1000:10.2f} us")
        print(f"  {'  of which before the send syscall':42s} {server_ns[1] / 1000:10.2f} us")
    ratio = out["py_client_rust_server_us"] / out["py_client_py_server_us"]
    print(f"  {'python client: rust server / python server':42s} {ratio:10.2f} x")
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--transports", default="tcp,unix")
    p.add_argument(
        "--no-build", action="store_true", help="use the examples already in rust/target/release"
    )
    args = p.parse_args(argv)
    if not args.no_build:
        build()
    return {t: bench(t, args.steps) for t in args.transports.split(",")}


if __name__ == "__main__":
    main()
