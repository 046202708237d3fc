"""``rlmesh eval MODEL --suite metaworld:MT10 ...``: a whole benchmark suite, one table.

Prints a line per task as it finishes, then a table (task, success with its 95 % interval,
mean return, episodes, seconds) and an overall line; ``--json PATH`` writes the same per
task (``SuiteResult.to_dict()``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from ..eval import Workers
from ..suites import SuiteResult, TaskResult, run as run_suite
from ._eval_report import print_table

__all__ = ["add_suite_arguments", "main_suite", "print_suite"]

_HEADERS = ["task", "success", "95% CI", "mean return", "episodes", "seconds"]


def add_suite_arguments(p: argparse.ArgumentParser) -> None:
    """The suite flags of ``rlmesh eval``."""
    p.add_argument(
        "--suite",
        default=None,
        metavar="SUITE",
        help="evaluate on a benchmark suite instead of ENV: metaworld:MT10, metaworld:MT50 or "
        "metaworld:TASK,TASK (MODEL may be metaworld:scripted); see docs/suites.md (default: none, ENV is "
        "evaluated)",
    )
    p.add_argument(
        "--tasks",
        default=None,
        metavar="A,B",
        help="with --suite: only these tasks (default: all of the suite's)",
    )
    p.add_argument(
        "--episodes-per-task",
        type=int,
        default=10,
        metavar="N",
        help="with --suite: episodes per task, seeds 0..N-1 (default: 10)",
    )
    p.add_argument(
        "--sandbox",
        nargs="?",
        const="venv",
        default=None,
        choices=("auto", "venv", "docker", "none"),
        help="with --suite: run the suite's envs in a sandbox (venv or docker); 'none' always in "
        "this process (default: auto, a venv sandbox when this Python lacks the simulator)",
    )
    p.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="with --suite: record every episode into one result bundle at DIR, videos per task "
        "(default: no recording)",
    )


def _model_arg(spec: str, suite: str, resolve: Any) -> Any:
    """``scripted`` / ``SUITE:scripted`` -> the suite's scripted baseline; else as ``rlmesh eval``."""
    name = suite.partition(":")[0].strip().lower()
    if spec.strip().lower() in ("scripted", f"{name}:scripted"):
        return "scripted"
    return resolve(spec)


def _workers(args: argparse.Namespace) -> Any:
    timeout = getattr(args, "episode_timeout", None)
    if args.workers is None:
        if args.ray is not None:
            raise ValueError("--ray needs --workers N")
        if timeout is not None:
            raise ValueError("--episode-timeout needs --workers N")
        return None
    if args.ray is None and timeout is None:
        return args.workers
    return Workers(
        n=args.workers,
        backend="ray" if args.ray is not None else "processes",
        address=None if args.ray in (None, "local") else args.ray,
        progress=False if args.no_progress else None,
        episode_timeout_seconds=timeout,
        on_episode_timeout=getattr(args, "on_episode_timeout", "retry"),
    )


def main_suite(
    args: argparse.Namespace,
    env_kwargs: dict[str, Any],
    out: TextIO,
    *,
    tty: bool,
    resolve_model: Any,
) -> int:
    """Run ``--suite``; returns the exit code (errors propagate to ``rlmesh eval``'s handler)."""
    if args.env is not None:
        raise ValueError(f"give ENV or --suite, not both (got ENV {args.env!r})")
    if args.episodes is not None or args.seeds is not None:
        raise ValueError(
            "--episodes/--seeds do not apply to --suite: use --episodes-per-task N (seeds 0..N-1)"
        )
    sandbox = {"auto": None, "none": False}.get(args.sandbox, args.sandbox)
    model = _model_arg(args.model, args.suite, resolve_model)

    def on_task(t: TaskResult) -> None:
        if not args.no_progress:
            lo, hi = t.success_interval
            print(
                f"{t.task}: success {t.success_rate:.0%} [{lo:.0%}, {hi:.0%}] over {t.episodes} "
                f"episodes, mean return {t.mean_return:.1f}, {t.seconds:.1f}s",
                file=out,
                flush=True,
            )

    result = run_suite(
        model,
        args.suite,
        tasks=args.tasks,
        episodes_per_task=args.episodes_per_task,
        workers=_workers(args),
        sandbox=sandbox,
        record=args.record,
        journal=args.journal,
        max_episode_steps=args.max_episode_steps,
        on_task=on_task,
        progress=False if args.no_progress else None,
        **env_kwargs,
    )
    print_suite(result, out, rich_ok=tty)
    if args.json_path:
        doc = {"model": args.model, **result.to_dict()}
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
    return 0


def _rows(result: SuiteResult) -> list[list[str]]:
    rows = []
    for t in result.tasks:
        lo, hi = t.success_interval
        rows.append(
            [
                t.task,
                f"{t.success_rate:.1%}",
                f"[{lo:.2f}, {hi:.2f}]",
                f"{t.mean_return:.1f}",
                str(t.episodes),
                f"{t.seconds:.1f}",
            ]
        )
    return rows


def overall_line(result: SuiteResult) -> str:
    where = f"{result.workers} workers" if result.workers else "1 process"
    return (
        f"{result.suite}: {len(result.tasks)} tasks, {result.episodes} episodes, success "
        f"{result.success_rate:.1%} (mean over tasks), mean return {result.mean_return:.1f}, "
        f"{result.seconds:.1f}s ({result.episodes_per_hour:,.0f} episodes/hour, {where}"
        f"{', sandboxed' if result.sandboxed else ''})"
    )


def print_suite(result: SuiteResult, out: TextIO, *, rich_ok: bool) -> None:
    """The per-task table and the overall line."""
    title = f"rlmesh eval {result.model} on {result.suite}"
    summary = overall_line(result)
    print_table(
        out,
        title,
        _HEADERS,
        _rows(result),
        summary,
        rich_ok=rich_ok,
        left=("task",),
        first_left=True,
    )
