"""``rlmesh eval MODEL ENV``: run a model against an env and report (a thin CLI over ``rlmesh.run``).

``MODEL`` is ``random`` (:data:`rlmesh.RANDOM_SAMPLE`) or ``module:attr`` (a Model
instance or class, a predict callable, or a policy). ``ENV`` is an address
(``host:port``, ``tcp://...``, ``unix:///...``), a Gymnasium id (``CartPole-v1``) or
``module:attr`` (an env, an ``EnvFactory`` or a zero-argument callable returning an
env). The run's live progress line (episodes, steps/s, ETA, success rate) is drawn on
stderr when it is a terminal, and a line per finished episode is printed when stdout is
not one (a log, a pipe); a results table follows.
``--json PATH`` writes ``RunResult.to_dict()`` plus a ``success_signal`` flag. Exit 0
on success (a "quit" from the viewer included: the finished episodes are reported), 1 on
an error (one line; ``--verbose`` for the traceback; a policy's own exception names the
policy and its input layout), 2 on bad arguments, 130 on Ctrl-C, 143 on SIGTERM (the step
in flight is abandoned; the finished episodes are reported and written to ``--json``, or
kept in ``--journal`` with ``--workers``).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import traceback
from typing import Any

from .._gymid import make_gym_env
from .._target import importable, load_target
from .._termtext import term_safe
from ..client import RemoteModel
from ..errors import DependencyMissing
from ..eval import RANDOM_SAMPLE, Workers, run
from ..eval._view import normalize_view
from ..openpi import PolicyClient, obs_map_from_json
from ..transport.address import looks_like_address
from ._eval_report import EpisodeLog, json_result, policy_error, print_results
from ._signals import EXIT_TERMINATED, Terminated, sigterm_ends_command
from ._suite import add_suite_arguments, main_suite

__all__ = ["main", "parse_seeds", "resolve_env_arg", "resolve_model_arg"]

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def parse_seeds(tokens: list[str] | None) -> list[int] | None:
    """Seeds from CLI tokens: ints and inclusive ranges ``A..B``.

    >>> parse_seeds(["3", "0..2"])
    [3, 0, 1, 2]
    """
    if tokens is None:
        return None
    out: list[int] = []
    for tok in tokens:
        for part in tok.split(","):
            part = part.strip()
            if not part:
                continue
            if ".." in part:
                lo, hi = part.split("..", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError(f"empty seed range {part!r}: the end must be >= the start")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    return out


def resolve_model_arg(spec: str, *, obs_map: dict[str, Any] | None = None) -> Any:
    """``random`` -> ``RANDOM_SAMPLE``; an address -> a ``RemoteModel`` (a served model);
    ``ws://host:port`` -> an openpi policy server (:class:`rlmesh.openpi.PolicyClient`, with
    ``obs_map``); ``module:attr`` or ``path/file.py:attr`` -> the imported object."""
    if spec.startswith(("ws://", "wss://")):
        return PolicyClient(spec, obs_map=obs_map)
    if obs_map is not None:
        raise ValueError("--obs-map is for an openpi policy server (MODEL ws://host:port)")
    if spec.strip().lower() in ("random", "random_sample"):
        return RANDOM_SAMPLE
    if looks_like_address(spec):
        return RemoteModel(spec)
    if not (_ENTRYPOINT.match(spec) or _ENTRYPOINT.match(importable(spec))):
        raise ValueError(
            "MODEL must be 'random', a served model's address (host:port, unix:///path), 'module:attr' "
            f"(e.g. mypkg.policy:model) or 'path/to/file.py:attr', got {spec!r}"
        )
    return load_target(spec, cwd=True)


def resolve_env_arg(spec: str, env_kwargs: dict[str, Any] | None = None) -> tuple[Any, bool]:
    """The env target for ``ENV`` and whether the CLI built it (and so must close it).

    ``env_kwargs`` (``--env-kwargs`` / ``--render-mode``) go to ``gymnasium.make`` for a
    Gymnasium id, or to a ``module:attr`` callable that builds the env.

    Raises:
        ValueError: ``env_kwargs`` for an address or an already-built env object.
    """
    kwargs = dict(env_kwargs or {})
    if looks_like_address(spec):
        if kwargs:
            raise ValueError(
                f"--env-kwargs/--render-mode apply to a Gymnasium id or a module:attr callable, "
                f"not to the served env at {spec!r}; configure it where it is served"
            )
        return spec, False
    if _ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py"):
        obj = load_target(spec, cwd=True)
        if (
            callable(obj)
            and not isinstance(obj, type)
            and not hasattr(obj, "reset")
            and not hasattr(obj, "make")
        ):
            return obj(**kwargs), True
        if kwargs:
            raise ValueError(
                f"--env-kwargs/--render-mode need ENV to be a Gymnasium id or a callable that builds "
                f"the env, but {spec!r} is an env object ({type(obj).__name__})"
            )
        return obj, False
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        raise DependencyMissing(
            f"ENV {spec!r} looks like a Gymnasium id, but gymnasium is not installed; "
            'pip install gymnasium (the "gymnasium" extra of rlmesh-py)',
            name="gymnasium",
        ) from None
    return make_gym_env(spec, **kwargs), True


def _is_gym_id(spec: str) -> bool:
    """Whether ``ENV`` names a Gymnasium id (not an address, ``module:attr`` or ``file.py:attr``)."""
    return not (
        looks_like_address(spec)
        or _ENTRYPOINT.match(spec)
        or spec.rpartition(":")[0].endswith(".py")
    )


def _gym_make(spec: str, **kwargs: Any) -> Any:
    """``gymnasium.make(spec, **kwargs)`` in a worker (a picklable recipe for ``--env-kwargs``)."""
    return make_gym_env(spec, **kwargs)


def _worker_env_arg(spec: str) -> Any:
    """``ENV`` for ``--workers``: an address or a Gymnasium id stays a string (each worker
    dials or makes its own); ``module:attr`` is imported and shipped (a callable is called
    in each worker, not here)."""
    if looks_like_address(spec) or not (
        _ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py")
    ):
        return spec
    return load_target(spec, cwd=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlmesh eval",
        description="Run a model against an env and report per-episode results.",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="'random', a served model's address (host:port, unix:///path), an openpi policy server "
        "(ws://host:port), or module:attr / path/file.py:attr "
        "(a Model, class, callable or policy; module:attr resolves from the current directory)",
    )
    p.add_argument(
        "env",
        metavar="ENV",
        nargs="?",
        default=None,
        help="an address (host:port, unix:///path), a Gymnasium id, or module:attr / path/file.py:attr "
        "(or --suite instead)",
    )
    p.add_argument(
        "--model-url",
        default=None,
        metavar="URL",
        help="the model is the openpi policy server at URL (ws://host:port); then the one "
        "positional argument is ENV (default: MODEL names the model)",
    )
    p.add_argument(
        "--obs-map",
        default=None,
        metavar="JSON",
        help="with an openpi server: server key -> observation path, role, "
        '{"image": PATH, "size": N} or {"state": [PATH, ...]} (default: the observation\'s own '
        "keys; see docs/openpi.md)",
    )
    p.add_argument(
        "--episodes",
        "--max-episodes",
        dest="episodes",
        type=int,
        default=None,
        help="episode count (default: len(seeds) or 1)",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        default=None,
        help="per-episode seeds: ints and inclusive ranges A..B (default: unseeded)",
    )
    p.add_argument(
        "--max-episode-steps",
        type=int,
        default=None,
        help="truncate each episode after N steps (default: the env's own limit)",
    )
    p.add_argument(
        "--max-episode-seconds",
        type=float,
        default=None,
        help="truncate each episode after S seconds (default: no limit)",
    )
    p.add_argument(
        "--execution-horizon",
        type=int,
        default=1,
        help="actions replayed per chunk (chunk models) (default: 1)",
    )
    p.add_argument(
        "--instruction",
        default=None,
        help="instruction written into the model's Text inputs (default: none)",
    )
    p.add_argument(
        "--close-env",
        action="store_true",
        help="shut the env down when the run ends (default: leave it serving)",
    )
    p.add_argument(
        "--json",
        dest="json_path",
        default=None,
        metavar="PATH",
        help="write the RunResult as JSON (default: no file)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress output (default: a live line on stderr when it is a terminal, and a line per "
        "episode on stdout when it is not one)",
    )
    p.add_argument(
        "--view",
        default=None,
        metavar="VIEW",
        help="watch live: terminal, http, http:PORT or both; see docs/viewer.md (default: no viewer)",
    )
    p.add_argument(
        "--env-kwargs",
        default=None,
        metavar="JSON",
        help="keyword arguments (a JSON object) for gymnasium.make(ENV, ...) or the module:attr env callable (default: none)",
    )
    p.add_argument(
        "--render-mode",
        default=None,
        metavar="MODE",
        help="render_mode for a Gymnasium id or env callable (default: rgb_array with --view, else the env's default)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="print the traceback on error (default: one line)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="run the episodes in N worker processes (or Ray actors with --ray); see docs/distributed.md (default: this process)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="with --workers: use Ray; ADDRESS is 'auto' or a cluster address, none starts a local Ray (default: local processes)",
    )
    p.add_argument(
        "--journal",
        default=None,
        metavar="PATH",
        help="with --workers: record finished episodes in PATH; a re-run skips them; with --suite a "
        "directory holding the suite's journal (default: no journal)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --workers: stop the worker of an episode still running after SECONDS (default: no deadline)",
    )
    p.add_argument(
        "--on-episode-timeout",
        choices=("retry", "record"),
        default="retry",
        help="with --episode-timeout: run a stopped episode again on a fresh worker, or record it as "
        "timed out (default: retry)",
    )
    add_suite_arguments(p)
    return p


def _distributed_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(workers, journal)`` from ``--workers`` / ``--ray`` / ``--journal``."""
    if args.workers is None:
        if args.ray is not None or args.journal is not None:
            raise ValueError("--ray and --journal need --workers N")
        if args.episode_timeout is not None:
            raise ValueError(
                "--episode-timeout needs --workers N (--max-episode-seconds truncates episodes in "
                "this process)"
            )
        return None, None
    ray = args.ray
    workers = Workers(
        n=args.workers,
        backend="ray" if ray is not None else "processes",
        address=None if ray in (None, "local") else ray,
        episode_timeout_seconds=args.episode_timeout,
        on_episode_timeout=args.on_episode_timeout,
    )
    return workers, args.journal


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlmesh eval``; returns the process exit code."""
    with sigterm_ends_command("eval") as term:
        try:
            code = _main(argv)
        except Terminated as exc:  # outside the run (a build, a worker pool): nothing to report
            print(exc, file=sys.stderr)
            return EXIT_TERMINATED
        if term.terminated:
            print(
                "rlmesh eval: terminated (SIGTERM); the episodes finished before it are reported",
                file=sys.stderr,
            )
            return EXIT_TERMINATED
        return code


def _main(argv: list[str] | None) -> int:
    out = sys.stdout
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        seeds, env_kwargs = _usage_checked(parser, args)
    except SystemExit as exc:
        return int(exc.code or 0)
    tty = bool(getattr(out, "isatty", lambda: False)())
    log: EpisodeLog | None = None
    workers: Any = None
    journal: Any = None
    try:
        if args.suite is not None:  # a benchmark suite: one run per task (_suite.py)
            return main_suite(args, env_kwargs, out, tty=tty, resolve_model=resolve_model_arg)
        if args.env is None:
            raise ValueError(
                "give ENV (an address, a Gymnasium id or module:attr) or --suite SUITE"
            )
        model = resolve_model_arg(args.model, obs_map=_obs_map_arg(args.obs_map))
        workers, journal = _distributed_args(args)
        view = normalize_view(args.view)
        if view is not None and args.render_mode is None and _is_gym_id(args.env):
            env_kwargs.setdefault("render_mode", "rgb_array")  # something for the viewer to show
        if workers is None:
            env, built = resolve_env_arg(args.env, env_kwargs)
        else:  # each worker builds its own env: ship a picklable recipe, not an env
            env, built = _worker_env_arg(args.env), False
            if env_kwargs and _is_gym_id(args.env):
                env = functools.partial(_gym_make, args.env, **env_kwargs)
            elif env_kwargs and callable(env):
                env = functools.partial(env, **env_kwargs)
        total = (
            args.episodes if args.episodes is not None else (len(seeds) if seeds is not None else 1)
        )
        on_terminal = view is not None and view.backend in ("terminal", "both")
        # the live line is the run's own (stderr, on a terminal); the per-episode log is for
        # an stdout that is no terminal (a file, a pipe, CI)
        log = EpisodeLog(total, out, quiet=args.no_progress or on_terminal or tty)
        extra: dict[str, Any] = {} if workers is None else {"workers": workers, "journal": journal}
        result = run(
            model,
            env,
            seeds=seeds,
            max_episodes=args.episodes,
            max_episode_steps=args.max_episode_steps,
            max_episode_seconds=args.max_episode_seconds,
            hooks=log,
            instruction=args.instruction,
            close_env=args.close_env or built,
            execution_horizon=args.execution_horizon,
            view=view,
            progress=False if args.no_progress or on_terminal else None,
            **extra,
        )
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rate = result.success_rate
        print_results(result, out, rich_ok=tty, rate=rate)
        if args.json_path:
            doc = {"model": args.model, "env": args.env, "result": json_result(result)}
            with open(args.json_path, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
        return 0
    except KeyboardInterrupt:
        print("rlmesh eval: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        if workers is not None and journal is not None:
            print(f"rlmesh eval: the finished episodes are kept in {journal}", file=sys.stderr)
        raise
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        else:
            layout = log.layout if log is not None else None
            line = policy_error(exc, args.model, layout)
            print(line or f"{type(exc).__name__}: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1


def _obs_map_arg(text: str | None) -> dict[str, Any] | None:
    """``--obs-map JSON`` as an obs_map (``None``: not given)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f'--obs-map: not valid JSON ({exc}); e.g. --obs-map \'{{"observation/state": ""}}\''
        ) from None
    return obs_map_from_json(data)


def _model_and_env(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--model-url URL ENV`` is ``URL ENV``: put the positionals where they belong."""
    if args.model_url is not None:
        if args.env is not None:
            parser.error("give the model either as MODEL or as --model-url, not both")
        if not args.model_url.startswith(("ws://", "wss://")):
            parser.error(
                f"--model-url takes an openpi server's ws://host:port, got {args.model_url!r}"
            )
        args.model, args.env = args.model_url, args.model
    if args.env is None and args.suite is None:
        parser.error("give ENV (an address, a Gymnasium id or module:attr) or --suite SUITE")


def _usage_checked(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[int] | None, dict[str, Any]]:
    """``--seeds`` / ``--env-kwargs`` / ``--render-mode`` parsed, or a usage error (exit 2)."""
    _model_and_env(parser, args)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(
            f"--seeds: {exc} (expected ints and inclusive ranges A..B, e.g. --seeds 0..9 42)"
        )
    env_kwargs: dict[str, Any] = {}
    if args.env_kwargs is not None:
        try:
            env_kwargs = json.loads(args.env_kwargs)
        except ValueError as exc:
            parser.error(
                f"--env-kwargs: not valid JSON ({exc}); e.g. --env-kwargs '{{\"max_episode_steps\": 50}}'"
            )
        if not isinstance(env_kwargs, dict):
            parser.error(f"--env-kwargs must be a JSON object, got {type(env_kwargs).__name__}")
    if args.render_mode is not None:
        env_kwargs["render_mode"] = args.render_mode
    return seeds, env_kwargs
