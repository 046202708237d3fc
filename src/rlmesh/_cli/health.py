"""``rlmesh health ADDR``: exit 0 when an endpoint at ADDR answers, 1 when not (2: bad arguments)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._termtext import term_safe
from .._token import TLS_CA_ENV, TOKEN_ENV, read_token_file
from ..errors import RLMeshException
from ..transport.probe import ping, wait_ready

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rlmesh health``; returns the exit code."""
    p = argparse.ArgumentParser(prog="rlmesh health", description="Probe an rlmesh endpoint.")
    p.add_argument("address", help="host:port, tcp://host:port, tls://host:port or unix:///path")
    p.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help=f"send the endpoint's token stored in PATH: the session counts need it (default: ${TOKEN_ENV}, "
        "else none: the state only)",
    )
    p.add_argument(
        "--tls-ca",
        default=None,
        metavar="PATH",
        help=f"for tls:// addresses: the PEM CA bundle to trust (default: ${TLS_CA_ENV}, else the system store)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up after SECONDS (default: 5)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="keep probing until ready or --timeout (default: probe once)",
    )
    args = p.parse_args(argv)
    token = None
    if args.token_file:
        try:
            token = read_token_file(args.token_file)
        except ValueError as exc:
            p.error(f"--token-file: {exc}")
    try:
        if args.wait:
            health = wait_ready(
                args.address, timeout_seconds=args.timeout, token=token, tls_ca=args.tls_ca
            )
        else:
            health = ping(
                args.address, timeout_seconds=args.timeout, token=token, tls_ca=args.tls_ca
            )
    except (RLMeshException, ValueError) as exc:
        print(f"not serving: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1
    if health.authenticated is False:
        sessions = "sessions withheld: the endpoint needs a token (--token-file PATH)"
    else:
        sessions = f"sessions {health.sessions_in_use}/{health.session_limit}"
    print(  # a Pong's service and state are the peer's words: escaped (issue 28)
        f"serving: {term_safe(health.service)} at {health.address} ({term_safe(health.state)}, "
        f"{sessions}, {health.latency_ms:.1f} ms)"
    )
    return 0
