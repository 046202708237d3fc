"""The viewer's HUD: run telemetry (EVAL-70), outcomes (VIEW-8, DELTA-44), the HUD line (VIEW-15), run statistics.

Everything here is pure or touched only by the eval thread; publishers read the
fields without locks (a torn read shows a value one step old, never a wrong type).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EMA_KEEP",
    "HudState",
    "RunStats",
    "format_duration",
    "format_hud",
    "outcome_of",
    "wilson_interval",
]

#: EMA weight of the previous value (EVAL-70): ``new = 0.85 * old + 0.15 * sample``.
EMA_KEEP = 0.85

#: Samples kept for the reward sparkline and the action plot.
SERIES_LEN = 240


def outcome_of(terminated: bool, truncated: bool, success: bool | None) -> str:
    """The HUD outcome of an ended episode (VIEW-8 as amended by DELTA-44).

    An env-reported success wins; a reported failure is ``"failure"`` when the
    episode terminated; without a success signal a terminated episode is
    ``"done"`` (never an inferred success); anything else is ``"timeout"``.

    >>> outcome_of(True, False, True), outcome_of(True, False, False), outcome_of(True, False, None), outcome_of(False, True, None)
    ('success', 'failure', 'done', 'timeout')
    """
    if success is True:
        return "success"
    if terminated:
        return "failure" if success is False else "done"
    return "timeout"


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of a success rate (``(0, 1)`` when ``n == 0``).

    >>> [round(x, 3) for x in wilson_interval(8, 10)]
    [0.49, 0.943]
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def format_duration(seconds: float) -> str:
    """``M:SS``, or ``H:MM:SS`` past an hour (VIEW-15).

    >>> format_duration(75.4), format_duration(3725)
    ('1:15', '1:02:05')
    """
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _ms(x: float) -> str:
    return f"{x:.1f}ms" if x < 10 else f"{x:.0f}ms"


def format_hud(hud: dict[str, Any], width: int = 1000) -> str:
    """The one-line HUD (VIEW-15): groups joined by ``"  |  "``, dropped right to left as needed.

    Groups: progress (``ep i/N``, ``step S``, elapsed, ``seed N``), timing
    (``model Xms  env Yms  Z.Zsps``), chunk (``chunk p/L`` when ``L > 1``),
    reward/outcome (``R +1.50`` and the outcome), frame (``WxH  Nfps``). When
    the line is wider than ``width`` the frame group goes first, then chunk,
    then timing; step and reward always stay. Unknown values (``episode`` 0,
    ``seed`` -1, ``width`` 0) are omitted.

    >>> format_hud({"episode": 2, "episodes": 5, "step": 17, "elapsed_s": 3.2, "seed": 7,
    ...             "model_ms": 4.25, "env_ms": 12.0, "sps": 30.0, "reward": 1.5,
    ...             "outcome": "", "width": 64, "height": 48, "fps": 29.7, "chunk_pos": 0, "chunk_len": 0})
    'ep 2/5  step 17  0:03  seed 7  |  model 4.2ms  env 12ms  30.0sps  |  R +1.50  |  64x48  30fps'
    >>> format_hud({"step": 3, "reward": -0.5, "outcome": "timeout", "model_ms": 1.0, "env_ms": 1.0, "sps": 9.0}, 20)
    'step 3  |  R -0.50 timeout'
    """
    progress = []
    episode = int(hud.get("episode", 0) or 0)
    episodes = int(hud.get("episodes", 0) or 0)
    if episode > 0:
        progress.append(f"ep {episode}/{episodes}" if episodes > 0 else f"ep {episode}")
    progress.append(f"step {int(hud.get('step', 0))}")
    progress.append(format_duration(float(hud.get("elapsed_s", 0.0) or 0.0)))
    seed = hud.get("seed", -1)
    if seed is not None and int(seed) >= 0:
        progress.append(f"seed {int(seed)}")
    timing = (
        f"model {_ms(float(hud.get('model_ms', 0.0)))}  env {_ms(float(hud.get('env_ms', 0.0)))}  "
        f"{float(hud.get('sps', 0.0)):.1f}sps"
    )
    chunk_len = int(hud.get("chunk_len", 0) or 0)
    chunk = f"chunk {int(hud.get('chunk_pos', 0))}/{chunk_len}" if chunk_len > 1 else ""
    reward = f"R {float(hud.get('reward', 0.0)):+.2f}"
    outcome = str(hud.get("outcome", "") or "")
    if outcome:
        reward += f" {outcome}"
    w = int(hud.get("width", 0) or 0)
    frame = f"{w}x{int(hud.get('height', 0))}  {float(hud.get('fps', 0.0)):.0f}fps" if w > 0 else ""
    optional = {"timing": timing, "chunk": chunk, "frame": frame}

    def line() -> str:
        groups = [
            "  ".join(progress),
            optional["timing"],
            optional["chunk"],
            reward,
            optional["frame"],
        ]
        return "  |  ".join(g for g in groups if g)

    for drop in ("frame", "chunk", "timing"):
        text = line()
        if len(text) <= width:
            return text
        optional[drop] = ""
    text = line()
    if len(text) > width:  # the mandatory core: step and reward always stay
        text = f"step {int(hud.get('step', 0))}  |  {reward}"
    return text


@dataclass
class HudState:
    """What the eval thread knows about the run, updated per step (EVAL-70, VIEW-8)."""

    step: int = 0
    reward: float = 0.0
    outcome: str = ""
    model_ms: float = 0.0
    env_ms: float = 0.0
    sps: float = 0.0
    episode: int = 0
    episodes: int = 0
    seed: int = -1
    chunk_pos: int = 0
    chunk_len: int = 0
    width: int = 0
    height: int = 0
    fps: float = 0.0
    paused: bool = False
    started: float = 0.0
    #: ``time.perf_counter()`` of the last step, for ``sps`` (0: first step of an episode).
    last_step_t: float = 0.0

    def snapshot(self, now: float) -> dict[str, Any]:
        """The ``/hud.json`` document (VIEW-16) plus ``paused``."""
        return {
            "step": self.step,
            "reward": round(self.reward, 6),
            "outcome": self.outcome,
            "fps": round(self.fps, 2),
            "model_ms": round(self.model_ms, 3),
            "env_ms": round(self.env_ms, 3),
            "sps": round(self.sps, 2),
            "elapsed_s": round(now - self.started, 3) if self.started else 0.0,
            "episode": self.episode,
            "episodes": self.episodes,
            "seed": self.seed,
            "width": self.width,
            "height": self.height,
            "chunk_pos": self.chunk_pos,
            "chunk_len": self.chunk_len,
            "paused": self.paused,
        }


@dataclass
class RunStats:
    """The episode table and the live series of a run (the page's plots)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rewards: deque[float] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    actions: deque[Any] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    steps_total: int = 0
    version: int = 0

    def add_episode(self, result: Any, outcome: str) -> None:
        self.rows.append(
            {
                "index": int(result.index),
                "seed": result.seed,
                "steps": int(result.steps),
                "return": round(float(result.reward), 6),
                "success": result.success,
                "outcome": outcome,
                "duration_s": round(float(result.duration_s), 3),
            }
        )
        self.version += 1

    def summary(self) -> dict[str, Any]:
        """Success rate with its 95 % interval over episodes that reported success."""
        known = [r for r in self.rows if r["success"] is not None]
        wins = sum(1 for r in known if r["success"])
        lo, hi = wilson_interval(wins, len(known))
        n = len(self.rows)
        return {
            "episodes": n,
            "reported": len(known),
            "success_rate": (wins / len(known)) if known else None,
            "ci95": [round(lo, 4), round(hi, 4)] if known else None,
            "mean_return": (sum(r["return"] for r in self.rows) / n) if n else None,
        }
