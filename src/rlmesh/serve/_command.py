"""What every serve command shares: startup marks, ready announcements, the default
address, exit codes and target loading (``rlmesh serve``, ``rlmesh serve-model``,
``python -m rlmesh.serve``).

Split out of :mod:`rlmesh.serve._cli` so the three command modules import it and not
each other (issue 10 item 4).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._autoreset import Autoreset
from .._build import EDITION_BASE, resolve_declared_edition
from .._envview import Lanes, autoreset_name
from .._termtext import term_safe
from ..authoring import EnvFactory, build_env
from ..errors import WorkflowEditionWarning
from ..models import ModelBase
from ._options import ServeOptions

__all__ = [
    "announce",
    "binding_of",
    "default_address",
    "load_env_target",
    "options_of",
    "ready_fd_arg",
    "run_command",
    "serve_until_stopped",
    "startup_marks",
    "write_ready_fd",
]

_T0 = time.monotonic()
_MARKS: dict[str, float] = {}
_RESERVED_KWARGS = ("num_envs", "vectorization_mode", "framework", "device", "workflow_edition")


def _mark(phase: str) -> None:
    _MARKS[phase] = time.monotonic()


def _process_age_seconds() -> float | None:
    """Seconds since this process started, from /proc (None where unreadable)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def startup_marks() -> dict[str, str]:
    """``rlmesh.startup.<phase>_ms`` strings measured from process start (DELTA-12)."""
    age = _process_age_seconds()
    base = time.monotonic() - age if age is not None else _T0
    out = {f"rlmesh.startup.{k}_ms": f"{(v - base) * 1e3:.1f}" for k, v in _MARKS.items()}
    if age is not None:
        out["rlmesh.startup.process_ms"] = f"{(_T0 - base) * 1e3:.1f}"
    return out


def _startup_text() -> str:
    marks = startup_marks()
    parts = []
    for phase in ("process", "imports", "env", "model", "listen"):
        v = marks.get(f"rlmesh.startup.{phase}_ms")
        if v is not None:
            parts.append(f"{phase} {float(v) / 1e3:.1f}s")
    return f" (startup: {', '.join(parts)})" if parts else ""


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
        raise argparse.ArgumentTypeError(f"must be an open file descriptor number >= 3, got {text!r}") from None
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
        raise argparse.ArgumentTypeError(f"file descriptor {fd} is not open in this process") from None
    return fd


def _write_ready_file(path: str, address: str) -> None:
    """Write ``<address>\\n`` atomically: a fresh temp file in the same directory, then rename.

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` under an unpredictable name, so a
    symlink planted at a predictable name is never followed; the rename replaces ``path``
    itself (a symlink there is replaced, not written through). Readers never see a partial file.
    """
    import secrets

    directory = os.path.dirname(os.path.abspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
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


def default_address() -> str:
    """``$RLMESH_ADDRESS``, else ``127.0.0.1:$RLMESH_PORT`` (50051): loopback unless told otherwise."""
    return os.environ.get("RLMESH_ADDRESS") or f"127.0.0.1:{os.environ.get('RLMESH_PORT', '50051')}"


def _exposed(address: str) -> bool:
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


def import_packages(packages: Sequence[str]) -> None:
    """Import modules first so their envs self-register (CLI-1 ``--package``)."""
    for name in packages:
        importlib.import_module(name)


def _load_attr(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve(target: str) -> Any:
    """``module:attr`` -> the object; anything else (or a miss) -> ``None`` (a Gymnasium id)."""
    if ":" not in target:
        return None
    module_name = target.partition(":")[0]
    try:
        return _load_attr(target)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None  # not a module: maybe a Gymnasium "module:EnvId"
        raise
    except AttributeError:
        return None


def load_env_target(
    target: str,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    packages: Sequence[str] = (),
    autoreset: str | None = None,
) -> tuple[Any, Any]:
    """Build what ``EnvServer`` should serve for ``target``; returns ``(env_or_lanes, factory)``.

    ``num_envs > 1`` with no ``vectorization_mode`` builds ``num_envs`` envs served
    as lanes; ``"sync"``/``"async"`` builds a Gymnasium vector env (DELTA-23).
    ``autoreset`` (``"next-step"``, ``"same-step"``, ``"disabled"``) picks how the
    lanes autoreset; ``None`` is NEXT_STEP, like ``gymnasium.make_vec``.

    Raises:
        ValueError: bad counts/modes, or reserved keys in ``kwargs``.
        ParamError: a factory binding that does not validate (nothing built).
    """
    import_packages(packages)
    kwargs = dict(kwargs or {})
    bad = [k for k in _RESERVED_KWARGS if k in kwargs]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is a serving option, not an env parameter; pass it as --{bad[0].replace('_', '-')}"
        )
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    mode = None if autoreset is None else autoreset_name(autoreset)
    if mode is not None and num_envs == 1 and mode != Autoreset.DISABLED:
        raise ValueError("--autoreset applies to several lanes (--num-envs N > 1); a single env never autoresets")
    obj = _resolve(target)
    if isinstance(obj, EnvFactory) or (isinstance(obj, type) and issubclass(obj, EnvFactory)):
        factory, env = build_env(
            obj, kwargs, num_envs=num_envs, vectorization_mode=vectorization_mode, autoreset=autoreset
        )
        return env, factory
    vector_kwargs = {} if mode is None else {"autoreset_mode": _gym_autoreset(mode)}
    if obj is None:
        import gymnasium as gym

        if num_envs == 1:
            return gym.make(target, **kwargs), None
        if vectorization_mode is None:
            return Lanes([gym.make(target, **kwargs) for _ in range(num_envs)], mode or Autoreset.NEXT_STEP), None
        return gym.make_vec(
            target, num_envs=num_envs, vectorization_mode=vectorization_mode, vector_kwargs=vector_kwargs, **kwargs
        ), None
    if callable(getattr(obj, "reset", None)) and callable(getattr(obj, "step", None)) and not isinstance(obj, type):
        if kwargs or num_envs != 1:
            raise ValueError(f"{target} is an env instance; it takes no kwargs and serves one env")
        return obj, None
    if not callable(obj):
        raise TypeError(f"{target} is a {type(obj).__name__}, not an env, an env factory or a callable")
    if num_envs == 1:
        return obj(**kwargs), None
    if vectorization_mode is None:
        return Lanes([obj(**kwargs) for _ in range(num_envs)], mode or Autoreset.NEXT_STEP), None
    import gymnasium as gym

    thunks = [lambda: obj(**kwargs) for _ in range(num_envs)]
    vec_cls = gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
    return vec_cls(thunks, **vector_kwargs), None


def _gym_autoreset(mode: str) -> Any:
    """The ``gymnasium.vector.AutoresetMode`` of a wire mode name."""
    from gymnasium.vector import AutoresetMode

    return AutoresetMode(mode)


def _is_model_target(target: str, packages: Sequence[str]) -> bool:
    """Whether ``module:attr`` names an rlmesh Model class or instance."""
    try:
        import_packages(packages)
        obj = _resolve(target)
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


def options_of(args: argparse.Namespace) -> Any:
    return ServeOptions(
        allow_remote_shutdown=args.allow_remote_shutdown,
        idle_timeout_seconds=args.idle_timeout,
        workflow_edition=args.workflow_edition,
    )


def announce(args: argparse.Namespace, what: str, address: str, suffix: str = "") -> None:
    """RDY-3: the bound address on ``--ready-fd`` / ``--ready-file``, then the status line."""
    if args.ready_fd is not None:
        write_ready_fd(args.ready_fd, address)
    if args.ready_file:
        _write_ready_file(args.ready_file, address)
    if _exposed(address):
        suffix += (
            " - WARNING: this endpoint has no authentication and is reachable from other hosts; "
            "anyone who can reach it can drive it (bind 127.0.0.1 or a unix socket to keep it local)"
        )
    print(f"RLMesh serving {what} on {address}{suffix}", flush=True)


def run_command(args: argparse.Namespace, body: Any) -> int:
    """Exit codes shared by the serve commands: 0 stopped, 130 Ctrl-C, 1 error (one line)."""
    try:
        return int(body())
    except KeyboardInterrupt:
        return 130
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


def _edition_notice(args: argparse.Namespace, target: str) -> None:
    """DELTA-8 from the command line: warn only where the user can act, naming the flag.

    A Gymnasium id (``CartPole-v1``) is not the user's code: nothing to pin there, so
    no warning. A ``module:attr`` target is told about ``--workflow-edition``.
    """
    if args.workflow_edition:
        return
    if _resolve(target) is None:  # a Gymnasium id: the user cannot act on the env
        resolve_declared_edition(warn=False)
        warnings.filterwarnings("ignore", category=WorkflowEditionWarning)
        return
    resolve_declared_edition(
        warn=True,
        who=f"the served env {target}",
        hint=f"--workflow-edition {EDITION_BASE}, a `workflow_edition = \"{EDITION_BASE}\"` attribute on its class",
    )


def _close_all(env: Any) -> None:
    for e in env if isinstance(env, list) else [env]:
        try:
            e.close()
        except Exception:
            pass
