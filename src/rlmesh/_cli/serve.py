"""``rlmesh serve``: serve an env target from the command line (positional TARGET = env).

``python -m rlmesh.serve`` follows the reference grammar instead (positional = model,
``--env`` = env); see :mod:`rlmesh._cli.serve_module`.

TARGET is a Gymnasium id (``CartPole-v1``) or ``module:attr`` naming an env, an
env class or factory callable, or an :class:`rlmesh.EnvFactory` (CLI-1..5,
DELTA-23/24). The resolved address is announced on ``--ready-fd`` / in
``--ready-file`` once the listener is bound (RDY-3).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .._spawn.recipe import RESERVED_ENV_KWARGS, EnvRecipe, close_quietly, load_env_target
from ..serve._command import mark_startup, startup_text
from ..serve._server import EnvServer
from ..serve._sessions.control import SessionSpec
from ._serving import (
    add_address_flag,
    add_binding_flags,
    add_endpoint_flags,
    add_framework_flags,
    add_ready_flags,
    announce,
    binding_of,
    edition_notice,
    is_model_target,
    options_of,
    run_command,
    serve_until_stopped,
)
from .serve_model import main as serve_model

__all__ = ["build_parser", "main"]


def build_parser(prog: str = "rlmesh serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Serve an environment over TCP or a Unix socket (positional TARGET = env). "
        "`python -m rlmesh.serve` differs: there a positional TARGET is a model and an env is --env TARGET.",
    )
    p.add_argument(
        "target",
        nargs="?",
        help="a Gymnasium id, or module:attr naming an env, env class, factory callable or EnvFactory",
    )
    p.add_argument(
        "--env", dest="env_target", help="same as TARGET (upstream spelling; default: none)"
    )
    add_address_flag(p)
    p.add_argument(
        "--num-envs",
        type=_positive_int,
        default=int(os.environ.get("RLMESH_NUM_ENVS", "1") or 1),
        metavar="N",
        help="serve N copies of the env as the lanes of one endpoint; lanes autoreset like "
        "gymnasium.make_vec (see --autoreset) (default: $RLMESH_NUM_ENVS or 1)",
    )
    p.add_argument(
        "--autoreset",
        choices=("next-step", "same-step", "disabled"),
        default=os.environ.get("RLMESH_AUTORESET") or None,
        help="how lanes that end restart: next-step (the following step resets the lane, reward 0), "
        "same-step (reset at once, the terminal obs in info['final_obs']) or disabled (a done lane stays "
        "done until reset); published in the metadata (default: $RLMESH_AUTORESET or next-step; with "
        "--vectorization-mode, the vector env's own)",
    )
    p.add_argument(
        "--vectorization-mode",
        choices=("sync", "async"),
        default=os.environ.get("RLMESH_VECTORIZATION_MODE") or None,
        help="with --num-envs N, build a Gymnasium vector env instead of serving independent lanes "
        "(default: $RLMESH_VECTORIZATION_MODE or independent lanes)",
    )
    p.add_argument(
        "--import",
        "--package",
        dest="package",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first so its envs register, e.g. --import metaworld for Meta-World/MT1 "
        "(repeatable; default: none; the registering package of a namespaced id is found by itself "
        "when it is named after the namespace; 'MODULE:EnvId' works too)",
    )
    add_binding_flags(
        p,
        kwargs_help="JSON object of env kwargs (default: $RLMESH_MAKE_KWARGS or none)",
        param_help="one env/factory parameter, VALUE parsed as JSON else a string (repeatable; default: none)",
    )
    add_framework_flags(
        p,
        framework_help="numpy, torch or jax: the type the env's step() receives actions as (default: $RLMESH_FRAMEWORK or numpy)",
        device_help="device for torch/jax actions, e.g. cuda:0 (default: $RLMESH_DEVICE or the framework's default)",
    )
    add_endpoint_flags(p)
    p.add_argument(
        "--sessions",
        type=_positive_int,
        default=1,
        metavar="N",
        help="serve up to N clients at once, each with its own env (of --num-envs lanes) in its own worker "
        "process; client N+1 gets EndpointBusy unless it waits for a slot (default: 1, one session in this process)",
    )
    p.add_argument(
        "--prewarm",
        type=_nonnegative_int,
        default=0,
        metavar="K",
        help="keep K session workers with a built env ready, so a new client does not wait for make() "
        "(at most --sessions; default: 0, build on connect)",
    )
    p.add_argument(
        "--no-fuse",
        dest="fuse",
        action="store_false",
        help="a model TARGET with --sessions N: answer every predict in turn instead of fusing predicts that "
        "arrive together into one predict_batch forward (see rlmesh serve-model; default: fuse)",
    )
    add_ready_flags(p)
    p.add_argument(
        "--verbose", action="store_true", help="print tracebacks on errors (default: one line)"
    )
    return p


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main(argv: Sequence[str] | None = None, *, prog: str = "rlmesh serve") -> int:
    """Entry point; returns the exit code (0 stopped, 1 error, 130 Ctrl-C)."""
    mark_startup("imports")
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    target = args.target or args.env_target
    if not target or (args.target and args.env_target):
        parser.error("give exactly one TARGET (or --env TARGET)")
    if args.target and is_model_target(args.target, args.package):  # MOD-33: a positional model
        passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--"]
        return serve_model(passthrough, prog=prog)

    def body() -> int:
        kwargs = binding_of(args)
        for key in RESERVED_ENV_KWARGS:
            if key in kwargs:
                parser.error(f"{key!r} is a serving option; use --{key.replace('_', '-')}")
        options = options_of(args)
        edition_notice(args, target)
        if args.sessions != 1 or args.prewarm:
            return _serve_sessions(args, target, kwargs, options)
        env, factory = load_env_target(
            target,
            num_envs=args.num_envs,
            vectorization_mode=args.vectorization_mode,
            kwargs=kwargs,
            packages=args.package,
            autoreset=args.autoreset,
        )
        mark_startup("env")
        try:
            server = EnvServer(
                env, args.address, options=options, framework=args.framework, device=args.device
            )
        except BaseException:
            close_quietly(env)
            raise
        mark_startup("listen")
        announce(args, "env", server.address, startup_text(), server=server)
        try:
            return serve_until_stopped(server)
        finally:
            if factory is not None:
                factory.close()

    if args.prewarm > args.sessions:
        parser.error(f"--prewarm {args.prewarm} exceeds --sessions {args.sessions}")
    return run_command(args, body)


def _serve_sessions(
    args: argparse.Namespace, target: str, kwargs: dict[str, object], options: object
) -> int:
    """``--sessions N``: a supervisor here, each session's env in its own worker process."""
    recipe = EnvRecipe(
        target,
        kwargs,
        num_envs=args.num_envs,
        vectorization_mode=args.vectorization_mode,
        autoreset=args.autoreset,
        packages=tuple(args.package),
    )
    spec = SessionSpec(recipe, framework=args.framework, device=args.device, options=options)  # type: ignore[arg-type]
    server = EnvServer.for_sessions(
        spec, args.address, sessions=args.sessions, prewarm=args.prewarm
    )
    mark_startup("listen")
    announce(
        args, "env", server.address, f" ({args.sessions} sessions){startup_text()}", server=server
    )
    return serve_until_stopped(server)
