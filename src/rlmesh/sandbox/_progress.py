"""A start-up status line for sandbox starts that take longer than a second.

Phases ("creating venv", "installing 3 packages", "make() running", "ready") are
shown on one line rewritten in place on a terminal, or one line per phase
otherwise, and only once the start has taken over ``delay_seconds`` -- a warm
start prints nothing. ``RLMESH_SANDBOX_PROGRESS=0`` silences it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(
        self, label: str, *, stream: TextIO | None = None, delay_seconds: float = 1.0
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay_seconds
        self.enabled = os.environ.get("RLMESH_SANDBOX_PROGRESS", "1") not in ("0", "", "false")
        self.started = time.monotonic()
        self.current = "starting"
        self.history: list[str] = []
        self._shown: str | None = None
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(
                target=self._tick, name="rlmesh-sandbox-progress", daemon=True
            )
            self._thread.start()

    def phase(self, text: str) -> None:
        with self._lock:
            self.current = text
            self.history.append(text)
        self._render()

    def _render(self, final: bool = False) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        if elapsed < self.delay:
            return
        with self._lock:
            text = self.current
            if not self._tty and text == self._shown and not final:
                return
            self._shown = text
            line = f"rlmesh sandbox {self.label}: {text} ({elapsed:.1f}s)"
            try:
                if self._tty:
                    self.stream.write("\r\x1b[K" + line + ("\n" if final else ""))
                else:
                    self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            if self._tty or self._shown != self.current:
                self._render()

    def done(self, text: str = "ready") -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            self.current = text
            self.history.append(text)
        if self._shown is not None or time.monotonic() - self.started >= self.delay:
            self._render(final=True)
