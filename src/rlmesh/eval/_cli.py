"""``rlmesh eval MODEL ENV``: run a model against an env and report (a thin CLI over ``rlmesh.run``).

``MODEL`` is ``random`` (:data:`rlmesh.RANDOM_SAMPLE`) or ``module:attr`` (a Model
instance or class, a predict callable, or a policy). ``ENV`` is an address
(``host:port``, ``tcp://...``, ``unix:///...``), a Gymnasium id (``CartPole-v1``) or
``module:attr`` (an env, an ``EnvFactory`` or a zero-argument callable returning an
env). A live progress line shows episodes, steps/s and the running success rate
(``rich`` when stdout is a TTY, plain lines otherwise); a results table follows.
``--json PATH`` writes ``RunResult.to_dict()``. Exit 0 on success, 1 on an error
(one line; ``--verbose`` for the traceback), 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
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
from ._api import run
from ._hooks import RunHooks, StepEvent
from ._results import EpisodeResult, RunResult
from ._view import normalize_view

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


def resolve_env_arg(spec: str) -> tuple[Any, bool]:
    """The env target for ``ENV`` and whether the CLI built it (and so must close it)."""
    if _ADDRESS.match(spec):
        return spec, False
    if _ENTRYPOINT.match(spec) or spec.rpartition(":")[0].endswith(".py"):
        obj = _import_attr(spec)
        if callable(obj) and not isinstance(obj, type) and not hasattr(obj, "reset") and not hasattr(obj, "make"):
            return obj(), True
        return obj, False
    try:
        import gymnasium
    except ImportError:
        raise DependencyMissing(
            f"ENV {spec!r} looks like a Gymnasium id, but gymnasium is not installed; "
            'pip install "rlmesh[gymnasium]"',
            name="gymnasium",
        ) from None
    return gymnasium.make(spec), True


class _Progress(RunHooks):
    """Live progress: rich when stdout is a TTY, else one plain line per episode."""

    def __init__(self, total: int, out: TextIO, *, rich_ok: bool) -> None:
        self.total = total
        self.out = out
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

    def on_run_start(self, context: Any) -> None:
        self.t0 = time.perf_counter()
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
        if self._bar is not None:
            self._bar.update(self._task, completed=self.episodes, sps=self._sps(), rate=self._rate())
        else:
            print(
                f"episode {self.episodes}/{self.total}: seed={result.seed} steps={result.steps} "
                f"reward={result.reward:.3f} success={result.success} | {self._sps():.0f} steps/s, "
                f"success rate {self._rate()}",
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
    """``RunResult.to_dict()``; without a success signal, ``success_rate`` is null and says why."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = result.to_dict()
    signal = has_success_signal(result)
    doc["success_signal"] = signal
    doc["terminated_rate"] = terminated_rate(result)
    if not signal:
        doc["success_rate"] = None
        doc["success_note"] = "no success signal: no episode reported info['is_success'] / ['success'] / ['task_success']"
    return doc


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
    p.add_argument("--verbose", action="store_true", help="print the traceback on error (default: one line)")
    return p


def eval_main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlmesh eval``; returns the process exit code."""
    out = sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    tty = bool(getattr(out, "isatty", lambda: False)())
    try:
        seeds = parse_seeds(args.seeds)
        model = resolve_model_arg(args.model)
        env, built = resolve_env_arg(args.env)
        total = args.episodes if args.episodes is not None else (len(seeds) if seeds is not None else 1)
        view = normalize_view(args.view)
        on_terminal = view is not None and view.backend in ("terminal", "both")
        progress = None if args.no_progress or on_terminal else _Progress(total, out, rich_ok=tty)
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
            print(f"{type(exc).__name__}: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1
