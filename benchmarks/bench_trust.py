"""What a token, metrics and TLS cost a served scalar CartPole step (issue 36).

Every configuration is served at once (``rlmesh serve CartPole-v1`` in child processes) and
driven from this process, in interleaved blocks: round r times a block of steps on each
configuration in turn (the order rotates every round), so all of them see the same minutes
of the shared machine. Reported per configuration: the median µs per step over the rounds,
and the median over rounds of its ratio to the plain endpoint's block of the same round.

- socket (``RLMESH_SHM=0``): plain TCP, a token, metrics on, TLS;
- same host (the default: the session moves into shared-memory rings): plain, a token,
  metrics on.

    python benchmarks/bench_trust.py --rounds 15 --steps 2000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import served, tls_files
from _ledger import process_cpu_ns

import rlmesh.numpy as rn

TOKEN = "bench-token-0123456789abcdef"


def _block(env: Any, steps: int, pid: int | None = None) -> tuple[float, float, float]:
    """``(wall, server CPU, client CPU)`` µs per step over ``steps`` steps (an episode that
    ends is reset, untimed; the block starts on a fresh episode)."""
    env.reset()
    server0 = process_cpu_ns(pid) if pid else 0
    client0 = process_cpu_ns()
    total = 0.0
    done = 0
    while done < steps:
        t0 = time.perf_counter()
        n = 0
        while done < steps:
            _, _, terminated, truncated, _ = env.step(done & 1)
            done += 1
            n += 1
            if terminated or truncated:
                break
        total += time.perf_counter() - t0
        if done < steps:
            env.reset()
    server = (process_cpu_ns(pid) - server0) / steps / 1e3 if pid else 0.0
    client = (process_cpu_ns() - client0) / steps / 1e3
    return total / steps * 1e6, server, client


def _measure(configs: dict[str, tuple[list[str], dict[str, Any]]], rounds: int, steps: int) -> None:
    with ExitStack() as stack:
        envs: dict[str, Any] = {}
        pids: dict[str, int] = {}
        for name, (extra, client_kw) in configs.items():
            address = stack.enter_context(served("CartPole-v1", "tcp", *extra))
            env = stack.enter_context(rn.RemoteEnv(address, **client_kw))
            env.reset(seed=0)
            _block(env, 200)  # warm: connect, attach (same host), caches
            envs[name] = env
            pids[name] = address.pid
        names = list(envs)
        measures = ("wall", "server CPU", "client CPU")
        per: dict[str, dict[str, list[float]]] = {n: {m: [] for m in measures} for n in names}
        ratio: dict[str, dict[str, list[float]]] = {n: {m: [] for m in measures} for n in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            this = {n: dict(zip(measures, _block(envs[n], steps, pids[n]))) for n in order}
            for n in names:
                for m in measures:
                    per[n][m].append(this[n][m])
                    ratio[n][m].append(this[n][m] / this[names[0]][m])
        for m in measures:
            for n in names:
                vals = per[n][m]
                print(
                    f"{n + ' ' + m:44s} {statistics.median(vals):10.2f} us  "
                    f"({min(vals):.1f}-{max(vals):.1f})"
                )
            for n in names[1:]:
                rs = ratio[n][m]
                print(
                    f"{n + ' / ' + names[0] + ' ' + m:44s} {statistics.median(rs):10.3f} x  "
                    f"(pairs {min(rs):.3f}-{max(rs):.3f})"
                )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--no-tls", action="store_true", help="skip TLS (trustme makes its certificate)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlmesh-bench-trust-") as tmp:
        token_file = Path(tmp) / "token"
        token_file.write_text(TOKEN + "\n")
        token = (["--token-file", str(token_file)], {"token": TOKEN})
        metrics = (["--metrics", "127.0.0.1:0"], {})
        socket_configs: dict[str, tuple[list[str], dict[str, Any]]] = {
            "socket: plain": ([], {}),
            "socket: token": token,
            "socket: metrics on": metrics,
        }
        if not args.no_tls:
            cert_pem, key_pem, ca_pem = tls_files(Path(tmp))
            socket_configs["socket: TLS"] = (
                [
                    "--address",
                    "tls://127.0.0.1:0",
                    "--tls-cert",
                    str(cert_pem),
                    "--tls-key",
                    str(key_pem),
                ],
                {"tls_ca": str(ca_pem)},
            )
        os.environ["RLMESH_SHM"] = "0"  # servers and this client: every byte on the socket
        try:
            _measure(socket_configs, args.rounds, args.steps)
        finally:
            del os.environ["RLMESH_SHM"]
        _measure(
            {
                "same host: plain": ([], {}),
                "same host: token": token,
                "same host: metrics on": metrics,
            },
            args.rounds,
            args.steps,
        )


if __name__ == "__main__":
    main()
