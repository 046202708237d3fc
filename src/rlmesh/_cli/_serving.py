"""What the three serve commands share: flags' types and defaults, the binding, the ready
announcement and the exit codes (``rlmesh serve``, ``rlmesh serve-model``,
``python -m rlmesh.serve``).

The serving itself (targets, envs, servers, the startup marks) lives in :mod:`rlmesh.serve`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .._build import EDITION_BASE, resolve_declared_edition
from .._spawn.recipe import import_packages, resolve_target
from .._termtext import term_safe
from .._token import TOKEN_ENV, read_token_file
from ..errors import InsecureEndpoint, WorkflowEditionWarning
from ..models import ModelBase
from ..serve._auth import check_exposure
from ..serve._options import ServeOptions
from ..transport import parse_bind_address

__all__ = [
    "add_ready_flags",
    "add_trust_flags",
    "announce",
    "binding_of",
    "default_address",
    "edition_notice",
    "exposed",
    "is_model_target",
    "options_of",
    "ready_fd_arg",
    "trust_of",
    "run_command",
    "serve_until_stopped",
    "write_ready_fd",
    "write_ready_file",
]


def write_ready_fd(fd: int, address: str) -> None:
    """RDY-3: write ``<address>\\n`` to ``fd`` completely, then close it."""
    data = f"{address}\n".encode()
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    finally:
        os.close(fd)


def ready_fd_arg(text: str) -> int:
    """``--ready-fd`` (argparse ``type=``): a descriptor the caller opened for the purpose.

    The fd is written and then closed, so stdin, stdout and stderr (0, 1, 2) are refused
    as a usage error: closing stdout would take the server's own output with it (issue 28).
    A descriptor that is not open is refused too.
    """
    try:
        fd = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an open file descriptor number >= 3, got {text!r}"
        ) from None
    if fd in (0, 1, 2):
        raise argparse.ArgumentTypeError(
            f"{fd} is the server's own {('stdin', 'stdout', 'stderr')[fd]}, which --ready-fd would close; "
            "pass a descriptor opened for the purpose (3 or above), or use --ready-file PATH "
            "(the address is also printed on the 'RLMesh serving' line)"
        )
    if fd < 0:
        raise argparse.ArgumentTypeError(f"must be an open file descriptor number >= 3, got {fd}")
    try:
        os.fstat(fd)
    except OSError:
        raise argparse.ArgumentTypeError(
            f"file descriptor {fd} is not open in this process"
        ) from None
    return fd


def write_ready_file(path: str, address: str) -> None:
    """Write ``<address>\\n`` atomically: a fresh temp file in the same directory, then rename.

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` under an unpredictable name, so a
    symlink planted at a predictable name is never followed; the rename replaces ``path``
    itself (a symlink there is replaced, not written through). Readers never see a partial file.
    """
    import secrets

    directory = os.path.dirname(os.path.abspath(path))
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    for _ in range(16):  # bounded: a name clash on 64 random bits is a fluke
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover
        raise FileExistsError(f"could not create a temporary file next to {path}")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{address}\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class UsageError(ValueError):
    """A flag's value cannot be used (a token file that cannot be read ...): exit 2."""


def add_trust_flags(p: argparse.ArgumentParser) -> None:
    """Who may connect, how, and what the endpoint reports: the token, TLS, metrics (docs/security.md)."""
    g = p.add_argument_group("security and metrics (docs/security.md)")
    g.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help=f"require the token stored in PATH (first line) at every handshake (default: ${TOKEN_ENV}, "
        "else none; an address other hosts can reach needs one, or --insecure-no-auth)",
    )
    g.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve an address other hosts can reach without a token: anyone who reaches the port can "
        "drive the endpoint (default: refuse to start)",
    )
    g.add_argument(
        "--tls-cert",
        default=None,
        metavar="PATH",
        help="serve TLS with this PEM certificate chain (with --tls-key); clients dial tls://host:port (default: no TLS)",
    )
    g.add_argument(
        "--tls-key",
        default=None,
        metavar="PATH",
        help="the PEM private key of --tls-cert (default: none)",
    )
    g.add_argument(
        "--tls-client-ca",
        default=None,
        metavar="PATH",
        help="also require a client certificate signed by this PEM CA bundle (default: none)",
    )
    g.add_argument(
        "--metrics",
        default=None,
        metavar="ADDR",
        help="serve Prometheus metrics on ADDR (host:port, or a port: 127.0.0.1) (default: none; needs "
        "the metrics extra)",
    )


def trust_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ServeOptions`` keywords of :func:`add_trust_flags`.

    Raises:
        UsageError: the token file cannot be read.
    """
    token = None
    path = getattr(args, "token_file", None)
    if path:
        try:
            token = read_token_file(path)
        except ValueError as exc:
            raise UsageError(f"--token-file: {exc}") from None
    return {
        "token": token,
        "insecure_no_auth": bool(getattr(args, "insecure_no_auth", False)),
        "tls_cert": getattr(args, "tls_cert", None),
        "tls_key": getattr(args, "tls_key", None),
        "tls_client_ca": getattr(args, "tls_client_ca", None),
        "metrics_address": getattr(args, "metrics", None),
    }


def check_address(address: str, options: ServeOptions, who: str) -> None:
    """Refuse an address other hosts can reach without a token before anything is built.

    Raises:
        InsecureEndpoint: see :func:`rlmesh.serve._auth.check_exposure`.
    """
    try:
        addr = parse_bind_address(address)
    except (TypeError, ValueError):
        return  # the server words a bad address itself
    check_exposure(addr, options, who=who)


def add_endpoint_flags(p: argparse.ArgumentParser) -> None:
    """The flags every serving command shares: the declared edition, remote shutdown, idle
    timeout, and the trust flags (:func:`add_trust_flags`)."""
    p.add_argument(
        "--workflow-edition",
        default=None,
        help="workflow edition to declare, e.g. 2026.06 (default: float to the newest supported, with a warning)",
    )
    p.add_argument(
        "--allow-remote-shutdown",
        action="store_true",
        help="let a client stop the server (default: off)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after SECONDS without a client (default: never)",
    )
    add_trust_flags(p)


def default_address() -> str:
    """``$RLMESH_ADDRESS``, else ``127.0.0.1:$RLMESH_PORT`` (50051): loopback unless told otherwise."""
    return os.environ.get("RLMESH_ADDRESS") or f"127.0.0.1:{os.environ.get('RLMESH_PORT', '50051')}"


def add_address_flag(p: argparse.ArgumentParser) -> None:
    """``--address``, where a serving command listens (default: :func:`default_address`)."""
    p.add_argument(
        "--address",
        default=default_address(),
        help="host:port, tcp://host:port or unix:///path (default: $RLMESH_ADDRESS or 127.0.0.1:50051)",
    )


def add_ready_flags(p: argparse.ArgumentParser) -> None:
    """``--ready-fd`` and ``--ready-file``: where :func:`announce` writes the bound address."""
    p.add_argument(
        "--ready-fd",
        type=ready_fd_arg,
        default=None,
        help="write the bound address to this fd, then close it (default: none)",
    )
    p.add_argument(
        "--ready-file",
        default=None,
        help="write the bound address to this file once listening (default: none)",
    )


def add_binding_flags(p: argparse.ArgumentParser, *, kwargs_help: str, param_help: str) -> None:
    """``--kwargs-json`` and the repeatable ``--param KEY=VALUE`` (read by :func:`binding_of`)."""
    p.add_argument("--kwargs-json", default=os.environ.get("RLMESH_MAKE_KWARGS"), help=kwargs_help)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help=param_help)


def add_framework_flags(
    p: argparse.ArgumentParser, *, framework_help: str, device_help: str
) -> None:
    """``--framework`` and ``--device``: the type (and device) a served env receives actions as."""
    p.add_argument(
        "--framework", default=os.environ.get("RLMESH_FRAMEWORK") or None, help=framework_help
    )
    p.add_argument("--device", default=os.environ.get("RLMESH_DEVICE") or None, help=device_help)


def exposed(address: str) -> bool:
    """Whether a bound address (``tcp://host:port`` / ``unix:///path``) is reachable from other hosts."""
    import ipaddress

    if address.startswith("unix:"):
        return False
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]").split("%")[0]
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def serve_until_stopped(server: Any) -> int:
    """Serve in the foreground; on the way out print one "stopped" line.

    Returns the exit status: 130 after Ctrl-C, 0 after SIGTERM, a remote shutdown or the
    idle timeout.
    """
    server.serve()
    reason = server.stop_reason or "stopped"
    print(f"RLMesh server stopped ({reason})", flush=True)
    return 130 if reason == "interrupted" else 0


def is_model_target(target: str, packages: Sequence[str]) -> bool:
    """Whether ``module:attr`` names an rlmesh Model class or instance."""
    try:
        import_packages(packages)
        obj = resolve_target(target)
    except Exception:
        return False
    return isinstance(obj, ModelBase) or (isinstance(obj, type) and issubclass(obj, ModelBase))


def binding_of(args: argparse.Namespace) -> dict[str, Any]:
    """``--kwargs-json`` (a JSON object) updated with every ``--param KEY=VALUE``."""
    binding: dict[str, Any] = {}
    if args.kwargs_json:
        loaded = json.loads(args.kwargs_json)
        if not isinstance(loaded, dict):
            raise ValueError("--kwargs-json must be a JSON object")
        binding.update(loaded)
    binding.update(_parse_params(args.param))
    return binding


def options_of(args: argparse.Namespace, who: str = "rlmesh serve") -> Any:
    """The command's ``ServeOptions``, its address checked (before anything is built).

    Raises:
        UsageError: a token file that cannot be read.
        InsecureEndpoint: ``--address`` reaches other hosts and there is no token (exit 2).
    """
    options = ServeOptions(
        allow_remote_shutdown=args.allow_remote_shutdown,
        idle_timeout_seconds=args.idle_timeout,
        workflow_edition=args.workflow_edition,
        **trust_of(args),
    )
    check_address(getattr(args, "address", "") or "", options, who)
    args.serve_options = options  # announce() says how the endpoint is protected
    return options


def announce(
    args: argparse.Namespace, what: str, address: str, suffix: str = "", *, server: Any = None
) -> None:
    """RDY-3: the bound address on ``--ready-fd`` / ``--ready-file``, then the status line."""
    if args.ready_fd is not None:
        write_ready_fd(args.ready_fd, address)
    if args.ready_file:
        write_ready_file(args.ready_file, address)
    suffix += protection(
        address, getattr(args, "serve_options", None), getattr(server, "metrics_address", None)
    )
    print(f"RLMesh serving {what} on {address}{suffix}", flush=True)


def protection(address: str, options: ServeOptions | None, metrics: str | None = None) -> str:
    """The status line's note on how the endpoint is protected (and a warning when it is not),
    and where its metrics are scraped."""
    parts = []
    if options is not None and options.token is not None:
        parts.append("token required")
    if metrics is not None:
        parts.append(f"metrics on {metrics}")
    note = f" [{', '.join(parts)}]" if parts else ""
    if exposed(address) and (options is None or options.token is None):
        note += (
            " - WARNING: this endpoint has no authentication and is reachable from other hosts; "
            "anyone who can reach it can drive it (--token-file PATH, or bind 127.0.0.1 or a unix socket)"
        )
    return note


def run_command(args: argparse.Namespace, body: Callable[[], int]) -> int:
    """Exit codes shared by the serve commands: 0 stopped, 130 Ctrl-C, 1 error (one line),
    2 a refused configuration (beyond loopback without a token, an unreadable token file)."""
    try:
        return int(body())
    except KeyboardInterrupt:
        return 130
    except (InsecureEndpoint, UsageError) as exc:
        print(f"Error: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 2
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"Error: {type(exc).__name__}: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1


def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param takes KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(raw)  # numbers, booleans, lists ...
        except ValueError:
            out[key] = raw  # a bare string
    return out


def edition_notice(args: argparse.Namespace, target: str) -> None:
    """DELTA-8 from the command line: warn only where the user can act, naming the flag.

    A Gymnasium id (``CartPole-v1``) is not the user's code: nothing to pin there, so
    no warning. A ``module:attr`` target is told about ``--workflow-edition``.
    """
    if args.workflow_edition:
        return
    if resolve_target(target) is None:  # a Gymnasium id: the user cannot act on the env
        resolve_declared_edition(warn=False)
        warnings.filterwarnings("ignore", category=WorkflowEditionWarning)
        return
    resolve_declared_edition(
        warn=True,
        who=f"the served env {target}",
        hint=f'--workflow-edition {EDITION_BASE}, a `workflow_edition = "{EDITION_BASE}"` attribute on its class',
    )
