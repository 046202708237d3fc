"""``rlmesh eval MODEL ENV``: run a model against an env and report (a thin CLI over ``rlmesh.run``).

``MODEL`` is ``random`` (:data:`rlmesh.RANDOM_SAMPLE`) or ``module:attr`` (a Model
instance or class, a predict callable, or a policy). ``ENV`` is an address
(``host:port``, ``tcp://...``, ``unix:///...``), a Gymnasium id (``CartPole-v1``) or
``module:attr`` (an env, an ``EnvFactory`` or a zero-argument callable returning an
env). A live progress line shows episodes, steps/s and the running success rate
(``rich`` when stdout is a TTY, plain lines otherwise); a results table follows.
``--json PATH`` writes ``RunResult.to_dict()`` plus a ``success_signal`` flag. Exit 0
on success (a "quit" from the viewer included: the finished episodes are reported), 1 on
an error (one line; ``--verbose`` for the traceback; a policy's own exception names the
policy and its input layout), 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import json
import os
import re
import sys
import time
import traceback
from typing import Any, TextIO

from .._termtext import term_safe
from ..client._model import RemoteModel
from ..errors import DependencyMissing
from ..models._sentinels import RANDOM_SAMPLE
from ..spaces import space_from_spec
from ._api import run
from ._hooks import RunHooks, StepEvent
from ._results import EpisodeResult, RunResult
from ._view import normalize_view
from ._workers import Workers

__all__ = ["eval_main", "parse_seeds", "resolve_env_arg", "resolve_model_arg"]

_ADDRESS = re.compile(r"^(tcp://|unix://|[\w.\-]+:\d+$|\d+$|\[[0-9a-fA-F:]+\]:\d+$)")
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


def _file_target(spec: str) -> str:
    """``path/to/file.py:attr`` -> ``file:attr`` with the file's directory importable (as ``describe``)."""
    module, sep, attr = spec.rpartition(":")
    if not (sep and module.endswith(".py")):
        return spec
    from pathlib import Path

    path = Path(module).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {module}")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    return f"{path.stem}:{attr}"


def _import_attr(spec: str) -> Any:
    """Import ``module:attr`` (resolved from the current directory first) or ``path/file.py:attr``."""
    spec = _file_target(spec)
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_model_arg(spec: str) -> Any:
    """``random`` -> ``RANDOM_SAMPLE``; an address -> a ``RemoteModel`` (a served model);
    ``module:attr`` or ``path/file.py:attr`` -> the imported object."""
    if spec.strip().lower() in ("random", "random_sample"):
        return RANDOM_SAMPLE
    if _ADDRESS.match(spec):
        return RemoteModel(spec)
    if not (_ENTRYPOINT.match(spec) or _ENTRYPOINT.match(_file_target(spec))):
        raise ValueError(
            "MODEL must be 'random', a served model's address (host:port, unix:///path), 'module:attr' "
            f"(e.g. mypkg.policy:model) or 'path/to/file.py:attr', got {spec!r}"
        )
    return _import_attr(spec)


def resolve_env_arg(spec: str, env_kwargs: dict[str, Any] | None = None) -> tuple[Any, bool]:
    """The env target for ``ENV`` and whether the CLI built it (and so must close it).

    ``env_kwargs`` (``--env-kwargs`` / ``--render-mode``) go to ``gymnasium.make`` for a
    Gymnasium id, or to a ``module:attr`` callable that builds the env.

    Raises:
        ValueError: ``env_kwargs`` for an address or an already-built env object.
    """
    kwargs = dict(env_kwargs or {})
    if _ADDRESS.match(spec):
        if kwargs:
            raise ValueError(
                f"--env-kwargs/--render-mode apply to a Gymnasium id or a module:attr callable, "
                f"not to the served env at {spec!r}; configure it where it is served"
            )
        return spec, False
    if _ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py"):
        obj = _import_attr(spec)
        if callable(obj) and not isinstance(obj, type) and not hasattr(obj, "reset") and not hasattr(obj, "make"):
            return obj(**kwargs), True
        if kwargs:
            raise ValueError(
                f"--env-kwargs/--render-mode need ENV to be a Gymnasium id or a callable that builds "
                f"the env, but {spec!r} is an env object ({type(obj).__name__})"
            )
        return obj, False
    try:
        import gymnasium
    except ImportError:
        raise DependencyMissing(
            f"ENV {spec!r} looks like a Gymnasium id, but gymnasium is not installed; "
            'pip install gymnasium (the "gymnasium" extra of rlmesh-py)',
            name="gymnasium",
        ) from None
    return gymnasium.make(spec, **kwargs), True


def _is_gym_id(spec: str) -> bool:
    """Whether ``ENV`` names a Gymnasium id (not an address, ``module:attr`` or ``file.py:attr``)."""
    return not (_ADDRESS.match(spec) or _ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py"))


def _gym_make(spec: str, **kwargs: Any) -> Any:
    """``gymnasium.make(spec, **kwargs)`` in a worker (a picklable recipe for ``--env-kwargs``)."""
    import gymnasium

    return gymnasium.make(spec, **kwargs)


def _worker_env_arg(spec: str) -> Any:
    """``ENV`` for ``--workers``: an address or a Gymnasium id stays a string (each worker
    dials or makes its own); ``module:attr`` is imported and shipped (a callable is called
    in each worker, not here)."""
    if _ADDRESS.match(spec) or not (_ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py")):
        return spec
    return _import_attr(spec)


class _Progress(RunHooks):
    """Live progress: rich when stdout is a TTY, else one plain line per episode."""

    def __init__(self, total: int, out: TextIO, *, rich_ok: bool, quiet: bool = False) -> None:
        self.total = total
        self.out = out
        self.quiet = quiet  # no output: only the observation layout is kept (for a policy's error)
        self.layout: str | None = None
        if quiet:
            rich_ok = False
        self.steps = 0
        self.episodes = 0
        self.successes = 0
        self.signals = 0  # episodes that reported a task outcome
        self.t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        if rich_ok:
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
            except ImportError:
                rich_ok = False
            else:
                self._bar = Progress(
                    TextColumn("[bold]episodes"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[sps]:>8.0f} steps/s"),
                    TextColumn("success {task.fields[rate]}"),
                    TimeElapsedColumn(),
                    TextColumn("ETA"),
                    TimeRemainingColumn(),
                    console=Console(file=out),
                    transient=False,
                )
                self._task = self._bar.add_task("eval", total=total, sps=0.0, rate="-")

    def _rate(self) -> str:
        if not self.episodes:
            return "-"
        if not self.signals:
            return "n/a (no success signal)"
        return f"{self.successes / self.episodes:.0%}"

    def _sps(self) -> float:
        dt = time.perf_counter() - self.t0
        return self.steps / dt if dt > 0 else 0.0

    def _eta(self) -> str:
        """Time left at the mean episode time so far (the total is known: episodes or seeds)."""
        left = self.total - self.episodes
        if left <= 0 or not self.episodes:
            return "0s" if left <= 0 else "-"
        secs = (time.perf_counter() - self.t0) / self.episodes * left
        return f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.1f}min"

    def on_run_start(self, context: Any) -> None:
        self.t0 = time.perf_counter()
        self.layout = _observation_layout(context)
        if self._bar is not None:
            self._bar.start()

    def on_step(self, event: StepEvent) -> None:
        self.steps += 1
        if self._bar is not None and self.steps % 256 == 0:
            self._bar.update(self._task, sps=self._sps())

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.episodes += 1
        self.successes += int(result.succeeded)
        self.signals += int(result.success is not None)
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.episodes, sps=self._sps(), rate=self._rate())
        else:
            print(  # "#" is EpisodeResult.index, as in the table and the JSON
                f"episode #{result.index} ({self.episodes}/{self.total}): seed={result.seed} "
                f"steps={result.steps} reward={result.reward:.3f} success={result.success} | "
                f"{self._sps():.0f} steps/s, success rate {self._rate()}, ETA {self._eta()}",
                file=self.out,
                flush=True,
            )

    def on_run_end(self, result: RunResult) -> None:
        if self._bar is not None:
            self._bar.stop()


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table_rows(result: RunResult) -> list[list[str]]:
    return [
        [
            str(e.index), str(e.seed), str(e.steps), _fmt(e.reward), str(e.terminated),
            str(e.truncated), str(e.success), _fmt(e.duration_s), _fmt(e.predict_ms), _fmt(e.step_ms),
        ]
        for e in result.episodes
    ]


_HEADERS = ["#", "seed", "steps", "reward", "terminated", "truncated", "success", "seconds", "predict ms", "step ms"]


def has_success_signal(result: RunResult) -> bool:
    """Whether any episode reported a task outcome (``info['is_success']`` and friends)."""
    return any(e.success is not None for e in result.episodes)


def terminated_rate(result: RunResult) -> float:
    n = result.num_episodes
    return sum(1 for e in result.episodes if e.terminated) / n if n else 0.0


def _print_results(result: RunResult, out: TextIO, *, rich_ok: bool, rate: float) -> None:
    if has_success_signal(result) or not result.episodes:
        outcome = f"success rate {rate:.1%}"
    else:  # the seed's `terminated` fallback would call a random CartPole policy 100 % successful
        outcome = (
            f"success rate: no success signal (the env reports no info['is_success']); "
            f"terminated {terminated_rate(result):.1%}"
        )
    summary = (
        f"{result.num_episodes} episodes, {result.total_steps} steps, mean reward "
        f"{result.mean_reward:.3f}, {outcome}"
    )
    if rich_ok:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            rich_ok = False
        else:
            table = Table(title="rlmesh eval", caption=summary)
            for h in _HEADERS:
                table.add_column(h, justify="left" if h in ("terminated", "truncated", "success") else "right")
            for row in _table_rows(result):
                table.add_row(*row)
            Console(file=out).print(table)
            return
    rows = [_HEADERS, *_table_rows(result)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADERS))]
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)), file=out)
    print(summary, file=out)


def _json_result(result: RunResult) -> dict[str, Any]:
    """``RunResult.to_dict()`` as it is (``success_rate`` is the API's value, the
    ``terminated`` fallback included), plus ``success_signal``: whether any episode
    reported a task outcome (when false, ``success_rate`` is the terminated rate)."""
    doc = result.to_dict()
    doc["success_signal"] = has_success_signal(result)
    return doc


def _observation_layout(context: Any) -> str | None:
    """The env's observation space as a short string (``Box(-inf, inf, (4,), float32)``), or None."""
    try:
        return repr(space_from_spec(context.contract.observation_space))
    except Exception:
        return None


def _policy_error(exc: BaseException, model_spec: str, layout: str | None) -> str | None:
    """A one-line report when ``exc`` was raised inside the user's policy, else None.

    The policy's code is the first frame outside rlmesh whose caller is rlmesh's model
    layer (``rlmesh/models``): an env's own exception is called from elsewhere.
    """
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../rlmesh
    models = os.path.join(pkg, "models") + os.sep
    frames = traceback.extract_tb(exc.__traceback__)
    where = None
    for prev, frame in itertools.pairwise(frames):
        if not os.path.abspath(frame.filename).startswith(pkg + os.sep):
            if os.path.abspath(prev.filename).startswith(models):
                where = frame
            break
    if where is None:
        return None
    notes = [n for n in getattr(exc, "__notes__", ()) if "model input" in n]
    parts = [f"the policy {model_spec!r} raised {type(exc).__name__}: {exc}"]
    parts.append(f"(at {os.path.basename(where.filename)}:{where.lineno} in {where.name})")
    if notes:
        parts.append(f"on its {notes[0]}")
    if layout:
        parts.append(f"(the env's observation_space: {layout})")
    return " ".join(parts) + "; --verbose prints the traceback"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlmesh eval",
        description="Run a model against an env and report per-episode results.",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="'random', a served model's address (host:port, unix:///path), or module:attr / path/file.py:attr "
        "(a Model, class, callable or policy; module:attr resolves from the current directory)",
    )
    p.add_argument(
        "env",
        metavar="ENV",
        help="an address (host:port, unix:///path), a Gymnasium id, or module:attr / path/file.py:attr",
    )
    p.add_argument("--episodes", "--max-episodes", dest="episodes", type=int, default=None, help="episode count (default: len(seeds) or 1)")
    p.add_argument("--seeds", nargs="+", default=None, help="per-episode seeds: ints and inclusive ranges A..B (default: unseeded)")
    p.add_argument("--max-episode-steps", type=int, default=None, help="truncate each episode after N steps (default: the env's own limit)")
    p.add_argument("--max-episode-seconds", type=float, default=None, help="truncate each episode after S seconds (default: no limit)")
    p.add_argument("--execution-horizon", type=int, default=1, help="actions replayed per chunk (chunk models) (default: 1)")
    p.add_argument("--instruction", default=None, help="instruction written into the model's Text inputs (default: none)")
    p.add_argument("--close-env", action="store_true", help="shut the env down when the run ends (default: leave it serving)")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH", help="write the RunResult as JSON (default: no file)")
    p.add_argument("--no-progress", action="store_true", help="no live progress output (default: a live line on a terminal, one line per episode otherwise)")
    p.add_argument("--view", default=None, metavar="VIEW", help="watch live: terminal, http, http:PORT or both; see docs/viewer.md (default: no viewer)")
    p.add_argument("--env-kwargs", default=None, metavar="JSON", help="keyword arguments (a JSON object) for gymnasium.make(ENV, ...) or the module:attr env callable (default: none)")
    p.add_argument("--render-mode", default=None, metavar="MODE", help="render_mode for a Gymnasium id or env callable (default: rgb_array with --view, else the env's default)")
    p.add_argument("--verbose", action="store_true", help="print the traceback on error (default: one line)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="run the episodes in N worker processes (or Ray actors with --ray); see docs/distributed.md (default: this process)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS", help="with --workers: use Ray; ADDRESS is 'auto' or a cluster address, none starts a local Ray (default: local processes)")
    p.add_argument("--journal", default=None, metavar="PATH", help="with --workers: record finished episodes in PATH; a re-run skips them (default: no journal)")
    return p


def _distributed_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(workers, journal)`` from ``--workers`` / ``--ray`` / ``--journal``."""
    if args.workers is None:
        if args.ray is not None or args.journal is not None:
            raise ValueError("--ray and --journal need --workers N")
        return None, None
    ray = args.ray
    workers = Workers(
        n=args.workers,
        backend="ray" if ray is not None else "processes",
        address=None if ray in (None, "local") else ray,
        progress=False if args.no_progress else None,
    )
    return workers, args.journal


def eval_main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlmesh eval``; returns the process exit code."""
    out = sys.stdout
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        seeds, env_kwargs = _usage_checked(parser, args)
    except SystemExit as exc:
        return int(exc.code or 0)
    tty = bool(getattr(out, "isatty", lambda: False)())
    progress: _Progress | None = None
    try:
        model = resolve_model_arg(args.model)
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
        total = args.episodes if args.episodes is not None else (len(seeds) if seeds is not None else 1)
        on_terminal = view is not None and view.backend in ("terminal", "both")
        quiet = args.no_progress or on_terminal
        # with --workers the run draws its own live line (done/total, rate, ETA, workers alive)
        progress = None if workers is not None else _Progress(total, out, rich_ok=tty, quiet=quiet)
        extra: dict[str, Any] = {} if workers is None else {"workers": workers, "journal": journal}
        result = run(
            model,
            env,
            seeds=seeds,
            max_episodes=args.episodes,
            max_episode_steps=args.max_episode_steps,
            max_episode_seconds=args.max_episode_seconds,
            hooks=progress,
            instruction=args.instruction,
            close_env=args.close_env or built,
            execution_horizon=args.execution_horizon,
            view=view,
            **extra,
        )
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rate = result.success_rate
        _print_results(result, out, rich_ok=tty, rate=rate)
        if args.json_path:
            doc = {"model": args.model, "env": args.env, "result": _json_result(result)}
            with open(args.json_path, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
        return 0
    except KeyboardInterrupt:
        print("rlmesh eval: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        else:
            layout = progress.layout if progress is not None else None
            line = _policy_error(exc, args.model, layout)
            print(line or f"{type(exc).__name__}: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1


def _usage_checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[int] | None, dict[str, Any]]:
    """``--seeds`` / ``--env-kwargs`` / ``--render-mode`` parsed, or a usage error (exit 2)."""
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(f"--seeds: {exc} (expected ints and inclusive ranges A..B, e.g. --seeds 0..9 42)")
    env_kwargs: dict[str, Any] = {}
    if args.env_kwargs is not None:
        try:
            env_kwargs = json.loads(args.env_kwargs)
        except ValueError as exc:
            parser.error(f"--env-kwargs: not valid JSON ({exc}); e.g. --env-kwargs '{{\"max_episode_steps\": 50}}'")
        if not isinstance(env_kwargs, dict):
            parser.error(f"--env-kwargs must be a JSON object, got {type(env_kwargs).__name__}")
    if args.render_mode is not None:
        env_kwargs["render_mode"] = args.render_mode
    return seeds, env_kwargs
