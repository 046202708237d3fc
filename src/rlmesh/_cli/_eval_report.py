"""What ``rlmesh eval`` prints: the per-episode log, the results table, the JSON document
and the one-line report of a policy's own exception (the live line is ``rlmesh.run``'s own).
"""

from __future__ import annotations

import itertools
import os
import traceback
from collections.abc import Collection, Iterable, Sequence
from typing import Any, TextIO

from ..eval import EpisodeResult, RunHooks, RunResult
from ..eval._progress import RunProgress
from ..spaces import space_from_spec

__all__ = ["EpisodeLog", "json_result", "policy_error", "print_results"]


class EpisodeLog(RunHooks):
    """``rlmesh eval``'s hooks: a line per finished episode on ``out``, and the observation layout.

    Each line names the episode, then reads as the run's progress line (the one
    ``rlmesh.run`` draws live on a terminal, :class:`rlmesh.eval._progress.RunProgress`):
    ``episode #2: seed=7 steps=12 reward=12.000 success=None | episodes 3/3 | ...``.
    ``quiet`` prints nothing (the layout is still kept, for a policy's error). No
    ``on_step``: the log costs the run nothing per step, and ``--workers`` takes it.
    """

    def __init__(self, total: int, out: TextIO, *, quiet: bool = False) -> None:
        self.out = out
        self.quiet = quiet
        self.layout: str | None = None
        self.status = RunProgress(total, enabled=False)  # counts; never draws

    def on_run_start(self, context: Any) -> None:
        self.status.start()
        self.layout = _observation_layout(context)

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.status.update(episode=result)
        if not self.quiet:
            print(  # "#" is EpisodeResult.index, as in the table and the JSON
                f"episode #{result.index}: seed={result.seed} steps={result.steps} "
                f"reward={result.reward:.3f} success={result.success} | {self.status.line()}",
                file=self.out,
                flush=True,
            )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table_rows(result: RunResult) -> list[list[str]]:
    return [
        [
            str(e.index),
            str(e.seed),
            str(e.steps),
            _fmt(e.reward),
            str(e.terminated),
            str(e.truncated),
            str(e.success),
            _fmt(e.duration_s),
            _fmt(e.predict_ms),
            _fmt(e.step_ms),
        ]
        for e in result.episodes
    ]


_HEADERS = [
    "#",
    "seed",
    "steps",
    "reward",
    "terminated",
    "truncated",
    "success",
    "seconds",
    "predict ms",
    "step ms",
]


def has_success_signal(result: RunResult) -> bool:
    """Whether any episode reported a task outcome (``info['is_success']`` and friends)."""
    return any(e.success is not None for e in result.episodes)


def terminated_rate(result: RunResult) -> float:
    n = result.num_episodes
    return sum(1 for e in result.episodes if e.terminated) / n if n else 0.0


def print_results(result: RunResult, out: TextIO, *, rich_ok: bool, rate: float) -> None:
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
    left = ("terminated", "truncated", "success")
    print_table(
        out, "rlmesh eval", _HEADERS, _table_rows(result), summary, rich_ok=rich_ok, left=left
    )


def print_table(
    out: TextIO,
    title: str,
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    summary: str,
    *,
    rich_ok: bool,
    left: Collection[str] = (),
    first_left: bool = False,
) -> None:
    """A results table, then ``summary``: rich's table when ``rich_ok`` and rich imports
    (the ``left`` columns left-justified, ``summary`` its caption), else aligned plain text
    (right-justified but for the first column with ``first_left``)."""
    if rich_ok:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            table = Table(title=title, caption=summary)
            for h in headers:
                table.add_column(h, justify="left" if h in left else "right")
            for row in rows:
                table.add_row(*row)
            Console(file=out).print(table)
            return
    lines = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in lines) for i in range(len(headers))]
    for r in lines:
        cells = [c.rjust(w) for c, w in zip(r, widths, strict=True)]
        if first_left:
            cells[0] = r[0].ljust(widths[0])
        print("  ".join(cells), file=out)
    print(summary, file=out)


def json_result(result: RunResult) -> dict[str, Any]:
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


def policy_error(exc: BaseException, model_spec: str, layout: str | None) -> str | None:
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
