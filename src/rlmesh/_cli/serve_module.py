"""``python -m rlmesh.serve [MODEL] | --env ENV``: the reference grammar (MOD-33, AUTH-25, CLI-4).

A **positional target is a model**; an env is given with ``--env TARGET``.
``--framework``/``--device`` only make sense for an env: with a model target they are a
usage error (exit 2), decided from the arguments alone, before the target is imported.
The ``rlmesh serve`` console command (:mod:`rlmesh._cli.serve`) keeps the env-first grammar.
``rlmesh.serve.main`` is this module's :func:`main`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._spawn.recipe import import_packages, resolve_target
from ..models._base import declared_spec
from ..serve._command import mark_startup, startup_text
from ..serve._main import RESERVED_BINDING_KEYS, run_serve_env
from ..serve._model import ModelServer
from ..serve._options import ServeOptions
from ._serving import (
    add_address_flag,
    add_framework_flags,
    add_trust_flags,
    check_address,
    protection,
    run_command,
    trust_of,
    write_ready_file,
)
from .serve_model import load_model_target

__all__ = ["build_parser", "main"]

_PROG = "python -m rlmesh.serve"


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
    add_address_flag(p)
    add_framework_flags(
        p,
        framework_help="env only: numpy|torch|jax, the type the env receives actions as (default: $RLMESH_FRAMEWORK)",
        device_help="env only: torch/jax device (default: $RLMESH_DEVICE; ignored for numpy)",
    )
    p.add_argument(
        "--kwargs-json",
        default=os.environ.get("RLMESH_MAKE_KWARGS") or None,
        metavar="JSON",
        help="JSON object bound to make(**binding) / load(**binding) (default: $RLMESH_MAKE_KWARGS)",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="env only: import MODULE first so its envs register (repeatable; default: none)",
    )
    p.add_argument(
        "--workflow-edition", default=None, metavar="EDITION", help="the edition to declare"
    )
    add_trust_flags(p)
    p.add_argument(
        "--ready-file",
        default=None,
        metavar="PATH",
        help="rlmesh extension: write the bound address to PATH",
    )
    p.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    return p


def _parse(
    argv: Sequence[str] | None,
) -> tuple[argparse.ArgumentParser, argparse.Namespace, dict[str, Any], int]:
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
                parser.error(
                    f"{key!r} in --kwargs-json is a serving option, not an env parameter; use {knob}"
                )
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
    """``python -m rlmesh.serve`` (CNF2-B8): see :func:`rlmesh.serve.main` for the exit codes."""
    mark_startup("imports")
    _parser, args, binding, num_envs = _parse(argv)

    options: ServeOptions | None = None

    def trust() -> ServeOptions:  # the token, TLS and metrics flags; the address checked first
        nonlocal options
        options = ServeOptions(workflow_edition=args.workflow_edition, **trust_of(args))
        check_address(args.address, options, "python -m rlmesh.serve")
        return options

    def announce(what: str, bound: str, shown: str, metrics: str | None = None) -> None:
        if args.ready_file:
            write_ready_file(args.ready_file, bound)  # always dialable: the real bound address
        note = protection(bound, options, metrics)
        print(f"RLMesh serving {what} on {shown}{startup_text()}{note}", flush=True)

    def serve_model() -> int:
        opts = trust()
        model = load_model_target(args.model, binding)
        mark_startup("model")
        if declared_spec(model) is None:
            print(
                "RLMesh: the served model declares no spec; clients drive it with raw env values",
                file=sys.stderr,
            )
        server = ModelServer(model, args.address, options=opts)
        mark_startup("listen")
        announce(
            "model", server.address, args.address, server.metrics_address
        )  # DELTA-23: as requested
        server.serve()
        return 0

    def listening(address: str) -> None:
        mark_startup("listen")
        announce("env", address, address)  # an env is shown at its resolved bound address

    def serve_env_target() -> int:
        opts = trust()
        source: Any = args.env
        import_packages(args.imports)
        resolved = resolve_target(
            args.env
        )  # module:attr -> the object; a Gymnasium id stays a string
        if resolved is not None:
            source = resolved
        run_serve_env(
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
            built=lambda: mark_startup("env"),
            options=opts,
        )
        return 0

    return run_command(args, serve_model if args.model is not None else serve_env_target)
