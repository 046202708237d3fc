"""The live progress line of a run: one implementation for ``rlmesh.run``, ``workers=`` and ``rlmesh eval``.

``episodes 37/200 | 812 steps/s | 4.1 ep/s | ETA 0:40 | elapsed 0:09 | success 62% (95% CI
48-74%)``, followed by ``| workers 8/8`` on a distributed run. The line is computed from
finished episodes only: the drive loops tell it nothing per step, so it costs a run no
work per step whether it is shown or not (an episode's steps arrive with its result).

When it shows (``progress=``):

- ``None`` (the default): when the stream (stderr) is a terminal or the run is in a
  Jupyter kernel, and only once the run has been going for :data:`SHOW_AFTER_SECONDS`;
  a shorter run prints nothing, a longer one leaves its final line behind;
- ``True``: from the start, wherever stderr goes, with a final line at the end;
- ``False``: never.

How it is drawn: redrawn in place by ``rich`` (``Live``, the ``cli`` extra) on a
terminal; with a carriage return in Jupyter or on a terminal without ``rich``; as a new
plain line every :data:`PLAIN_EVERY_SECONDS` elsewhere (a log file, a pipe). A small
daemon thread does the drawing, so a long episode still shows the clock move; the run's
own thread only counts finished episodes.

The success interval is Wilson's score interval, which stays inside [0, 1] and behaves
at 0 and n successes, unlike the normal approximation.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from ._observers import Observer

if TYPE_CHECKING:
    from ._results import EpisodeResult, RunResult

__all__ = [
    "PLAIN_EVERY_SECONDS",
    "REDRAW_SECONDS",
    "SHOW_AFTER_SECONDS",
    "RunProgress",
    "check_progress",
    "in_jupyter",
    "progress_wanted",
    "wilson_interval",
]

#: With ``progress=None`` the line appears once a run has been going this long: long enough
#: that a quick run (a test, a smoke check) prints nothing, short enough to be there before
#: anyone wonders whether the run is stuck.
SHOW_AFTER_SECONDS = 1.5
#: A line drawn in place (a terminal, Jupyter) is redrawn this often.
REDRAW_SECONDS = 0.5
#: Elsewhere (``progress=True`` into a file or a pipe) a new line is written this often.
PLAIN_EVERY_SECONDS = 10.0


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


def _isatty(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except Exception:
        return False


def in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell; Colab's derives from it)."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        shell = get() if callable(get) else None
    except Exception:
        return False
    return any(k.__name__ == "ZMQInteractiveShell" for k in type(shell).__mro__)


def check_progress(progress: Any) -> bool | None:
    """``progress=`` as given, once checked to be ``True``, ``False`` or ``None``.

    Raises:
        TypeError: anything else.
    """
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(
            f"progress= takes True, False or None (None: on a terminal), got {type(progress).__name__}"
        )
    return progress


def progress_wanted(progress: bool | None, out: Any = None) -> bool:
    """Whether ``progress=`` shows a line on ``out`` (stderr): ``None`` means a terminal or Jupyter.

    >>> import io
    >>> progress_wanted(None, io.StringIO()), progress_wanted(True, io.StringIO())
    (False, True)
    """
    if check_progress(progress) is not None:
        return bool(progress)
    return _isatty(sys.stderr if out is None else out) or in_jupyter()


class RunProgress(Observer):
    """The live line of one run (see the module docstring); ``enabled=False`` only counts.

    The drive loops hold it in their observer list (it asks for no steps); the driver of
    a distributed run calls :meth:`update` itself. :meth:`start` starts the clock and,
    when the line is shown, the drawing thread; :meth:`close` stops both and leaves the
    final line behind if one was shown (or ``enabled=True``).

    Example:
        >>> import io
        >>> from rlmesh.eval import EpisodeResult
        >>> line = RunProgress(4, enabled=False)
        >>> line.update(episode=EpisodeResult(0, 0, 12, 1.0, True, False, success=True))
        >>> line.line().split(" | ")[0], line.line().split(" | ")[-1]
        ('episodes 1/4', 'success 100% (95% CI 21%-100%)')
    """

    wants_steps = False

    def __init__(
        self,
        total: int,
        workers: int = 0,
        *,
        enabled: bool | None,
        out: TextIO | None = None,
    ) -> None:
        self.out: Any = out if out is not None else sys.stderr
        self.forced = enabled is True
        self.enabled = progress_wanted(enabled, self.out)
        self.total = total
        self.workers = workers
        self.done = 0
        self.resumed = 0
        self.successes = 0
        self.signals = 0
        self.steps = 0
        self.alive = 0
        self.t0 = time.perf_counter()
        self.show_after = 0.0 if self.forced else SHOW_AFTER_SECONDS
        self._stop = threading.Event()
        self._draw_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._mode = ""  # "live" (rich), "redraw" (carriage return) or "plain"; "" until shown
        self._live: Any = None
        self._width = 0
        self._closed = False

    # -- what the line says ------------------------------------------------------------------------

    def line(self) -> str:
        """The line as it reads now."""
        elapsed = time.perf_counter() - self.t0
        ran = self.done - self.resumed
        rate = ran / elapsed if elapsed > 0 else 0.0
        ep_rate = f"{elapsed / ran:.0f} s/ep" if ran and rate < 0.1 else f"{rate:.1f} ep/s"
        left = self.total - self.done
        eta = _clock(left / rate) if rate > 0 else "-"
        if self.done == 0:
            success = "success -"
        elif self.signals == 0:
            success = "success n/a (no success signal)"
        else:
            lo, hi = wilson_interval(self.successes, self.done)
            success = f"success {self.successes / self.done:.0%} (95% CI {lo:.0%}-{hi:.0%})"
        sps = self.steps / elapsed if elapsed > 0 else 0.0
        parts = [
            f"episodes {self.done}/{self.total}",
            f"{sps:.0f} steps/s",
            ep_rate,
            f"ETA {eta}",
            f"elapsed {_clock(elapsed)}",
            success,
        ]
        if self.workers:
            parts.append(f"workers {self.alive}/{self.workers}")
        return " | ".join(parts)

    def update(self, *, episode: Any = None, resumed: Any = None, alive: int | None = None) -> None:
        """Count a finished ``episode`` (or one a journal ``resumed``) and the ``alive`` workers."""
        if episode is not None:
            self.done += 1
            self.steps += int(episode.steps)
            self.successes += int(episode.succeeded)
            self.signals += int(episode.success is not None)
        if resumed is not None:
            self.done += 1
            self.resumed += 1
            self.successes += int(resumed.succeeded)
            self.signals += int(resumed.success is not None)
        if alive is not None:
            self.alive = alive

    # -- the observer (the single drive loops) ----------------------------------------------------

    def on_run_start(self, context: Any) -> None:
        self.start()

    def on_episode_end(self, result: EpisodeResult, lane: int) -> None:
        self.update(episode=result)

    def on_run_end(self, result: RunResult) -> None:
        self.close()

    # -- drawing ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the clock, and the drawing thread when the line is shown. Idempotent."""
        if self._thread is not None or self._closed:
            return
        self.t0 = time.perf_counter()
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._tick, name="rlmesh-progress", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        if self._stop.wait(self.show_after):
            return  # the run ended before the line was due
        self._draw()
        period = PLAIN_EVERY_SECONDS if self._mode == "plain" else REDRAW_SECONDS
        while not self._stop.wait(period):
            self._draw()

    def _open(self) -> None:
        """Pick how to draw (first draw only)."""
        tty = _isatty(self.out)
        if in_jupyter() and not tty:
            self._mode = "redraw"
        elif tty:
            self._mode = "redraw"
            try:
                from rich.console import Console
                from rich.live import Live
                from rich.text import Text
            except ImportError:
                return
            self._text = Text
            self._live = Live(
                Text(self.line()),
                console=Console(file=self.out),
                auto_refresh=False,
                transient=False,
            )
            self._live.start()
            self._mode = "live"
        else:
            self._mode = "plain"

    def _draw(self, final: bool = False) -> None:
        with self._draw_lock:
            try:
                if not self._mode:
                    self._open()
                text = self.line()
                if self._mode == "live":
                    try:
                        self._live.update(self._text(text), refresh=True)
                    finally:
                        if final:  # always: Live redirects stdout/stderr until it stops
                            self._live.stop()
                elif self._mode == "redraw":
                    pad = " " * max(0, self._width - len(text))
                    self._width = len(text)
                    self.out.write("\r" + text + pad + ("\n" if final else ""))
                    self.out.flush()
                else:
                    print(text, file=self.out, flush=True)
            except Exception:
                self._stop.set()  # a stream that cannot be written: stop drawing, never fail the run

    def close(self) -> None:
        """Stop drawing; leave the final line if one was shown (or ``enabled=True``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5.0)
        if self._mode or (self.forced and self.enabled):
            self._draw(final=True)
