"""One live progress line for a distributed run, and the Wilson interval it shows.

``episodes 37/200 | 4.1 ep/s | ETA 0:40 | success 62% (95% CI 48-74%) | workers 8/8``:
``rich`` redraws it in place on a terminal; elsewhere a plain line is printed at most
every few seconds. The success interval is Wilson's score interval, which stays inside
[0, 1] and behaves at 0 and n successes, unlike the normal approximation.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

__all__ = ["RunProgress", "wilson_interval"]


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson score interval of a success rate (``(0, 1)`` when ``n == 0``).

    >>> lo, hi = wilson_interval(8, 10)
    >>> round(lo, 3), round(hi, 3)
    (0.49, 0.943)
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunProgress:
    """The live line (``enabled=False``: does nothing)."""

    PLAIN_EVERY_SECONDS = 5.0

    def __init__(
        self, total: int, workers: int, *, enabled: bool | None, out: TextIO | None = None
    ) -> None:
        self.out = out if out is not None else sys.stderr
        tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else bool(enabled)
        self.total = total
        self.workers = workers
        self.done = 0
        self.resumed = 0
        self.successes = 0
        self.signals = 0
        self.alive = 0
        self.t0 = time.perf_counter()
        self._last_plain = 0.0
        self._live: Any = None
        if self.enabled and tty:
            try:
                from rich.console import Console
                from rich.live import Live
                from rich.text import Text
            except ImportError:
                pass
            else:
                self._text = Text
                self._live = Live(
                    Text(self.line()),
                    console=Console(file=self.out),
                    transient=False,
                    auto_refresh=False,
                )
                self._live.start()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        ran = self.done - self.resumed
        rate = ran / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = _clock(left / rate) if rate > 0 else "-"
        if self.done == 0:
            success = "success -"
        elif self.signals == 0:
            success = "success n/a (no success signal)"
        else:
            lo, hi = wilson_interval(self.successes, self.done)
            success = f"success {self.successes / self.done:.0%} (95% CI {lo:.0%}-{hi:.0%})"
        return (
            f"episodes {self.done}/{self.total} | {rate:.1f} ep/s | ETA {eta} | {success} | "
            f"workers {self.alive}/{self.workers}"
        )

    def update(
        self,
        *,
        episode: Any = None,
        resumed: Any = None,
        alive: int | None = None,
        force: bool = False,
    ) -> None:
        for result, is_resumed in ((episode, False), (resumed, True)):
            if result is None:
                continue
            self.done += 1
            self.resumed += int(is_resumed)
            self.successes += int(result.succeeded)
            self.signals += int(result.success is not None)
        if alive is not None:
            self.alive = alive
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(self._text(self.line()), refresh=True)
            return
        now = time.monotonic()
        if force or now - self._last_plain >= self.PLAIN_EVERY_SECONDS:
            self._last_plain = now
            print(self.line(), file=self.out, flush=True)

    def close(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.update(self._text(self.line()), refresh=True)
            live.stop()
        elif self.enabled:
            print(self.line(), file=self.out, flush=True)
            self.enabled = False
