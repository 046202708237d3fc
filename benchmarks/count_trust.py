"""Instructions per served scalar CartPole step with a token, metrics on, and TLS (issue 36).

Counted, not timed: both processes run under ``valgrind --tool=callgrind`` (deterministic,
unlike any timing on a shared machine), busy polling off, every byte on the socket
(``RLMESH_SHM=0``), ``PYTHONHASHSEED=0``. Each configuration runs two sessions that differ
only in their number of steps; the difference of the two instruction totals, divided by the
difference of the steps, is what one step costs each side (start-up, handshake, reset and
close cancel out; the client freezes its start-up heap so a full collection of it does not
land in one run and not the other). The env's own step is in the server's figure for every configuration alike.

    python benchmarks/count_trust.py [--short 500 --long 3500]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import tls_files

CLIENT = """
import gc
import sys
import rlmesh.numpy as rn
address, steps, token, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None, sys.argv[4] or None
with rn.RemoteEnv(address, token=token, tls_ca=ca) as env:
    obs, _ = env.reset(seed=0)
    gc.collect()
    gc.freeze()  # a full collection of the start-up heap is not a step's cost
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(0.1 * obs[0] + 0.5 * obs[1] + 10 * obs[2] + 2 * obs[3] > 0))
        assert not (terminated or truncated), "the episode ended: a reset would be counted"
"""


def _total(path: Path) -> int:
    text = path.read_text(errors="replace")
    match = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    if match is None:
        raise RuntimeError(f"no instruction total in {path}")
    return int(match.group(1))


def _session(
    tmp: Path, tag: str, steps: int, extra: list[str], token: str, ca: str
) -> tuple[int, int]:
    """Instructions of the server and of the client for one session of ``steps`` steps."""
    env = {
        **os.environ,
        "RLMESH_BUSY_POLL_US": "0",
        "RLMESH_SHM": "0",
        "PYTHONHASHSEED": "0",
        "RLMESH_WORKFLOW_EDITION": "",
    }
    ready = tmp / f"ready-{tag}-{steps}"
    server_out, client_out = tmp / f"server-{tag}-{steps}.cg", tmp / f"client-{tag}-{steps}.cg"
    grind = ["valgrind", "--tool=callgrind", "--quiet"]
    serve = [sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1"]
    serve += ["--kwargs-json", '{"max_episode_steps": 100000}']  # one episode, however long
    serve += ["--address", "127.0.0.1:0", "--ready-file", str(ready), *extra]
    proc = subprocess.Popen(
        [*grind, f"--callgrind-out-file={server_out}", *serve],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server under callgrind did not start: {serve}")
            time.sleep(0.1)
        address = ready.read_text().strip()
        client = [sys.executable, "-c", CLIENT, address, str(steps), token, ca]
        subprocess.run(
            [*grind, f"--callgrind-out-file={client_out}", *client],
            env=env,
            check=True,
            timeout=1800,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return _total(server_out), _total(client_out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--short", type=int, default=500)
    p.add_argument("--long", type=int, default=3500)
    p.add_argument("--no-tls", action="store_true")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="rlmesh-count-trust-") as tmpdir:
        tmp = Path(tmpdir)
        token_file = tmp / "token"
        token_file.write_text("count-token-0123456789\n")
        configs: dict[str, tuple[list[str], str, str]] = {
            "plain": ([], "", ""),
            "token": (["--token-file", str(token_file)], "count-token-0123456789", ""),
            "metrics on": (["--metrics", "127.0.0.1:0"], "", ""),
        }
        if not args.no_tls:
            cert_pem, key_pem, ca_pem = tls_files(tmp)
            configs["TLS"] = (
                [
                    "--address",
                    "tls://127.0.0.1:0",
                    "--tls-cert",
                    str(cert_pem),
                    "--tls-key",
                    str(key_pem),
                ],
                "",
                str(ca_pem),
            )
        base: tuple[float, float] | None = None
        steps = args.long - args.short
        print(
            f"{'configuration':16s} {'server instr/step':>18s} {'client instr/step':>18s} {'vs plain':>20s}"
        )
        for name, (extra, token, ca_path) in configs.items():
            s1, c1 = _session(tmp, name.replace(" ", "-"), args.short, extra, token, ca_path)
            s2, c2 = _session(tmp, name.replace(" ", "-"), args.long, extra, token, ca_path)
            server, client = (s2 - s1) / steps, (c2 - c1) / steps
            if base is None:
                base = (server, client)
            print(
                f"{name:16s} {server:18,.0f} {client:18,.0f} "
                f"{server / base[0]:9.3f}x {client / base[1]:9.3f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
