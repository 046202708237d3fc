"""``rlmesh.serve.serve_env`` and ``rlmesh.serve.main`` (``python -m rlmesh.serve``).

Two grammars serve things from a command line, and they differ on purpose:

- ``python -m rlmesh.serve`` (this module's :func:`main`) follows the reference
  (MOD-33, AUTH-25, CLI-4, DELTA-23): a **positional target is a model**, an env
  is given with ``--env TARGET``. ``--framework``/``--device`` only make sense
  for an env: with a model target they are a usage error (exit 2), decided from
  the arguments alone, before the target is imported.
- ``rlmesh serve`` (the console command, :mod:`rlmesh.serve._cli`) keeps the
  friendlier grammar: a positional target is an env (a Gymnasium id or
  ``module:attr``), with ``--num-envs``/``--param``/``--ready-file`` and more.

:func:`serve_env` is the blocking library call behind ``--env`` and
``EnvFactory.serve`` (seed 000, CNF2-A8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._build import resolve_declared_edition
from ..authoring import EnvFactory
from ..authoring._factory import build_env, framework_name
from ._command import (
    _exposed,
    _mark,
    _resolve,
    _startup_text,
    _write_ready_file,
    default_address,
    run_command,
)
from ._model import ModelServer
from ._model_cli import load_model_target
from ._options import ServeOptions
from ._pool import EnvRecipe, _build_plain, serve_sessions
from ._server import EnvServer

__all__ = ["main", "serve_env"]

#: Binding keys that are serving options, never make/load parameters (CLI-4, DELTA-23).
RESERVED_BINDING_KEYS = ("num_envs", "vectorization_mode", "framework", "device", "workflow_edition", "autoreset")
_DEVICE_FRAMEWORKS = ("torch", "jax")
_PROG = "python -m rlmesh.serve"


def serve_env(
    env_source: Any,
    address: str,
    /,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    framework: str | None = None,
    device: object | None = None,
    workflow_edition: str | None = None,
    autoreset: str | None = None,
    sessions: int = 1,
    prewarm: int = 0,
    **make_kwargs: Any,
) -> None:
    """Host an env on ``address`` (blocking) until the server is stopped.

    ``env_source`` and ``address`` are positional-only, so a make parameter
    named ``address`` or ``env_source`` passes through to ``make`` like any
    other keyword. The named keywords are serving options and never reach
    ``make`` (CLI-5).

    Args:
        env_source: An :class:`rlmesh.EnvFactory` (class or instance:
            ``prepare()`` + validated ``make(**make_kwargs)``, tags published),
            a make callable or env class (called with ``make_kwargs``), a live
            env (no kwargs), or a string: a Gymnasium id or ``module:attr``.
        address: ``"host:port"``, ``"tcp://host:port"`` or ``"unix:///path"``.
        num_envs: Lanes to serve. With ``vectorization_mode=None`` the source is
            built ``num_envs`` times and served as independent lanes.
        vectorization_mode: ``"sync"``/``"async"``: one Gymnasium vector env
            instead (served untagged).
        framework: ``"numpy"`` (default), ``"torch"`` or ``"jax"``: the type the
            env receives actions as. A factory's pinned framework is the default.
        device: Device for torch/jax actions; ignored for numpy.
        workflow_edition: The edition to declare (DELTA-7 rung 3).
        autoreset: How lanes restart when ``num_envs > 1``: ``"next-step"``
            (``None``, the default, like ``gymnasium.make_vec``), ``"same-step"`` or
            ``"disabled"``. With a vectorization mode, ``None`` keeps the vector env's own.
        **make_kwargs: The make binding.

    Raises:
        ParamError: a factory binding that does not validate (nothing built).
        ValueError: bad ``num_envs``/``vectorization_mode``, or a reserved key.
        NotImplementedError: torch/jax through a Gymnasium vector fan-out.
    """
    _serve_env(
        env_source,
        address,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        framework=framework,
        device=device,
        workflow_edition=workflow_edition,
        autoreset=autoreset,
        make_kwargs=make_kwargs,
        announce=lambda addr: print(f"RLMesh serving env on {addr}", flush=True),
        sessions=sessions,
        prewarm=prewarm,
    )


def _serve_env(
    env_source: Any,
    address: str,
    *,
    num_envs: int,
    vectorization_mode: str | None,
    framework: str | None,
    device: object | None,
    workflow_edition: str | None,
    make_kwargs: Mapping[str, Any],
    autoreset: str | None = None,
    announce: Callable[[str], None],
    built: Callable[[], None] = lambda: None,
    sessions: int = 1,
    prewarm: int = 0,
) -> None:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}")
    is_factory = isinstance(env_source, EnvFactory) or (
        isinstance(env_source, type) and issubclass(env_source, EnvFactory)
    )
    cls: Any = (env_source if isinstance(env_source, type) else type(env_source)) if is_factory else None
    pinned = cls._bridge if cls is not None else None
    fw = framework if framework is not None else framework_name(pinned)
    if vectorization_mode is not None and fw in _DEVICE_FRAMEWORKS:
        raise NotImplementedError(
            f"framework={fw!r} cannot be served through a Gymnasium vector env "
            f"(vectorization_mode={vectorization_mode!r}); drop vectorization_mode to serve "
            f"{num_envs} lanes instead"
        )
    declared = (
        resolve_declared_edition(served=workflow_edition, class_attr=cls.workflow_edition)
        if cls is not None
        else workflow_edition  # EnvServer resolves the lower rungs itself (DELTA-22)
    )
    if sessions != 1 or prewarm:  # issue 25: one env per session, each in its own worker process
        recipe = EnvRecipe(
            env_source,
            dict(make_kwargs),
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            autoreset=autoreset,
            framework=framework if framework is not None else pinned,
            device=device if fw in _DEVICE_FRAMEWORKS else None,
            options=ServeOptions(workflow_edition=declared),
        )
        serve_sessions(recipe, address, sessions=sessions, prewarm=prewarm, announce=announce)
        return
    factory: Any = None
    tags: Any = None
    if is_factory:
        factory, env = build_env(
            env_source, make_kwargs, num_envs=num_envs, vectorization_mode=vectorization_mode, autoreset=autoreset
        )
        tags = None if (cls.tag_params or vectorization_mode is not None) else cls.tags
    else:
        env = _build_plain(
            env_source, make_kwargs, num_envs=num_envs, vectorization_mode=vectorization_mode, autoreset=autoreset
        )
    built()
    try:
        server = EnvServer(
            env,
            address,
            options=ServeOptions(workflow_edition=declared),
            tags=tags,
            framework=framework if framework is not None else pinned,
            device=device if fw in _DEVICE_FRAMEWORKS else None,
        )
    except BaseException:
        for e in env if isinstance(env, list) else [env]:
            _close_quietly(e)
        if factory is not None:
            factory.close()
        raise
    announce(server.address)
    try:
        server.serve()
    finally:
        if factory is not None:
            factory.close()  # AUTH-4/O-9: the factory's close runs on teardown


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass


# -- python -m rlmesh.serve ------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m rlmesh.serve`` parser (MOD-33, AUTH-25, CLI-4)."""
    p = argparse.ArgumentParser(
        prog=_PROG,
        description=(
            "Serve a model (positional TARGET) or an env (--env TARGET). The `rlmesh serve` "
            "console command is the env-first variant: there a positional TARGET is an env."
        ),
        epilog=(
            "Environment variables: RLMESH_ADDRESS, RLMESH_FRAMEWORK, RLMESH_DEVICE, "
            "RLMESH_MAKE_KWARGS (defaults of the flags), RLMESH_NUM_ENVS (env lanes) and "
            "RLMESH_VECTORIZATION_MODE (sync|async: one Gymnasium vector env)."
        ),
    )
    p.add_argument(
        "model",
        nargs="?",
        metavar="TARGET",
        help="model target module:attr: a Model subclass (built with from_config), a Model instance, "
        "or a predict callable / policy object",
    )
    p.add_argument(
        "--env",
        dest="env",
        metavar="TARGET",
        help="env target: module:attr naming an EnvFactory (class or instance), a make callable or an "
        "env class; or a Gymnasium id",
    )
    p.add_argument(
        "--address",
        default=default_address(),
        help="host:port, tcp://host:port or unix:///path (default: $RLMESH_ADDRESS or 127.0.0.1:50051)",
    )
    p.add_argument(
        "--framework",
        default=os.environ.get("RLMESH_FRAMEWORK") or None,
        help="env only: numpy|torch|jax, the type the env receives actions as (default: $RLMESH_FRAMEWORK)",
    )
    p.add_argument(
        "--device",
        default=os.environ.get("RLMESH_DEVICE") or None,
        help="env only: torch/jax device (default: $RLMESH_DEVICE; ignored for numpy)",
    )
    p.add_argument(
        "--kwargs-json",
        default=os.environ.get("RLMESH_MAKE_KWARGS") or None,
        metavar="JSON",
        help="JSON object bound to make(**binding) / load(**binding) (default: $RLMESH_MAKE_KWARGS)",
    )
    p.add_argument("--workflow-edition", default=None, metavar="EDITION", help="the edition to declare")
    p.add_argument(
        "--ready-file", default=None, metavar="PATH", help="rlmesh extension: write the bound address to PATH"
    )
    p.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    return p


def _parse(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace, dict[str, Any], int]:
    """Parse and validate everything that is decided from the arguments alone (exit 2 on misuse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.model is None) == (args.env is None):
        parser.error("give exactly one of a positional model TARGET or --env TARGET")
    if args.model is not None:
        for flag, value in (("--framework", args.framework), ("--device", args.device)):
            if value is not None:
                parser.error(
                    f"{flag} applies to env targets only (set by the flag or ${'RLMESH_' + flag[2:].upper()}); "
                    "a served model owns its own framework and device"
                )
    binding: dict[str, Any] = {}
    if args.kwargs_json:
        try:
            loaded = json.loads(args.kwargs_json)
        except ValueError as exc:
            parser.error(f"--kwargs-json must be a JSON object: {exc}")
        if not isinstance(loaded, dict):
            parser.error(f"--kwargs-json must be a JSON object, got {type(loaded).__name__}")
        binding = loaded
    num_envs = 1
    if args.env is not None:
        for key in RESERVED_BINDING_KEYS:
            if key in binding:
                knob = {
                    "num_envs": "$RLMESH_NUM_ENVS",
                    "vectorization_mode": "$RLMESH_VECTORIZATION_MODE",
                }.get(key, f"--{key.replace('_', '-')}")
                parser.error(f"{key!r} in --kwargs-json is a serving option, not an env parameter; use {knob}")
        raw = os.environ.get("RLMESH_NUM_ENVS", "").strip()
        if raw:
            try:
                num_envs = int(raw)
            except ValueError:
                parser.error(f"RLMESH_NUM_ENVS must be an int >= 1, got {raw!r}")
            if num_envs < 1:
                parser.error(f"RLMESH_NUM_ENVS must be an int >= 1, got {raw!r}")
        mode = os.environ.get("RLMESH_VECTORIZATION_MODE", "").strip() or None
        if mode not in (None, "sync", "async"):
            parser.error(f"RLMESH_VECTORIZATION_MODE must be 'sync' or 'async', got {mode!r}")
        args.vectorization_mode = mode
    return parser, args, binding, num_envs


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlmesh.serve``: serve a model (positional) or an env (``--env``) (CNF2-B8).

    Returns the exit code: 0 after a normal stop, 1 on an error (one ``Error:``
    line on stderr), 130 on Ctrl-C. Invalid arguments -- no target or two,
    ``--framework``/``--device`` with a model, ``--kwargs-json`` that is not a
    JSON object, a reserved binding key, a bad ``RLMESH_NUM_ENVS`` -- are usage
    errors: ``SystemExit`` with status 2.
    """
    _mark("imports")
    _parser, args, binding, num_envs = _parse(argv)

    def announce(what: str, bound: str, shown: str) -> None:
        if args.ready_file:
            _write_ready_file(args.ready_file, bound)  # always dialable: the real bound address
        warning = " - WARNING: this endpoint has no authentication and is reachable from other hosts" if _exposed(bound) else ""
        print(f"RLMesh serving {what} on {shown}{_startup_text()}{warning}", flush=True)

    def serve_model() -> int:
        model = load_model_target(args.model, binding)
        _mark("model")
        if getattr(model, "_spec", None) is None:
            print("RLMesh: the served model declares no spec; clients drive it with raw env values", file=sys.stderr)
        server = ModelServer(model, args.address, options=ServeOptions(workflow_edition=args.workflow_edition))
        _mark("listen")
        announce("model", server.address, args.address)  # DELTA-23: a model is shown as requested
        server.serve()
        return 0

    def listening(address: str) -> None:
        _mark("listen")
        announce("env", address, address)  # an env is shown at its resolved bound address

    def serve_env_target() -> int:
        source: Any = args.env
        resolved = _resolve(args.env)  # module:attr -> the object; a Gymnasium id stays a string
        if resolved is not None:
            source = resolved
        _serve_env(
            source,
            args.address,
            num_envs=num_envs,
            vectorization_mode=args.vectorization_mode,
            framework=args.framework,
            device=args.device,
            workflow_edition=args.workflow_edition,
            autoreset=os.environ.get("RLMESH_AUTORESET") or None,
            make_kwargs=binding,
            announce=listening,
            built=lambda: _mark("env"),
        )
        return 0

    return run_command(args, serve_model if args.model is not None else serve_env_target)
