"""SIGTERM always ends a foreground server, even when the env call never returns (issue 28).

``serve()`` on the main thread handles SIGTERM gracefully: stop accepting, drain the
request in flight, ``env.close()``, remove the unix socket file, return. That needs the
env call in flight to return. When it does not, the process must still end: what sent
SIGTERM (Docker, systemd, Kubernetes, a test harness) expects it to.

:class:`TermWatch` watches for SIGTERM from a thread of its own, through the
interpreter's wake-up fd (``signal.set_wakeup_fd``): the C-level signal handler writes
the signal number there even while the main thread is stuck in an extension that never
returns to Python. On the first SIGTERM it asks the loop to stop and starts the budget
(drain + close); if serving has not ended when the budget runs out, it closes the
listener, removes the unix socket file this server created, says so on stderr and
exits the process with status 143 (128 + SIGTERM). A second SIGTERM does that at once.

Known limit: an extension that holds the GIL forever lets no Python thread run at all;
only SIGKILL ends such a process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["EXIT_TERMINATED", "TermWatch"]

#: Exit status of a server that SIGTERM ended before serving could stop (128 + SIGTERM).
EXIT_TERMINATED = 128 + 15


class TermWatch:
    """A thread that turns SIGTERM into a bounded stop (install on the main thread only).

    Args:
        stop: Ask the serve loop to stop (thread-safe; called on the first SIGTERM).
        done: Set once serving has ended (the graceful path).
        budget_seconds: How long the graceful path may take after the first SIGTERM.
        abandon: Close the listener and remove the socket file (called before the exit).
        what: Names the server in the stderr line (``"EnvServer at unix:///..."``).
    """

    def __init__(
        self,
        stop: Callable[[], None],
        done: threading.Event,
        budget_seconds: float,
        abandon: Callable[[], None],
        what: str,
    ) -> None:
        self._stop = stop
        self._done = done
        self._budget = budget_seconds
        self._abandon = abandon
        self._what = what
        self._rfd = -1
        self._wfd = -1
        self._previous_fd = -1
        self._thread: threading.Thread | None = None
        self._terms = 0
        self._deadline_event = threading.Event()

    def install(self) -> bool:
        """Start watching; ``False`` (nothing installed) off the main thread or without SIGTERM."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
            return False
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)  # the C handler must never block
        try:
            self._previous_fd = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(rfd)
            os.close(wfd)
            return False
        self._rfd, self._wfd = rfd, wfd
        self._thread = threading.Thread(target=self._watch, name="rlmesh-sigterm-watch", daemon=True)
        self._thread.start()
        return True

    def uninstall(self) -> None:
        """Stop watching and give the wake-up fd back (main thread; idempotent)."""
        if self._wfd < 0:
            return
        try:
            signal.set_wakeup_fd(self._previous_fd)
        except (ValueError, OSError):
            pass
        os.close(self._wfd)  # EOF ends the watcher's read
        self._wfd = -1
        self._deadline_event.set()
        if self._thread is not None:
            self._thread.join(5.0)
        os.close(self._rfd)
        self._rfd = -1

    # -- the watcher thread --------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._rfd, 64)
            except OSError:
                return
            if not data:
                return  # uninstalled
            for signum in data:
                if signum == signal.SIGTERM:
                    self._on_sigterm()

    def _on_sigterm(self) -> None:
        self._terms += 1
        if self._terms == 1:
            self._stop()
            threading.Thread(target=self._deadline, name="rlmesh-sigterm-deadline", daemon=True).start()
        else:
            self._exit("a second SIGTERM")

    def _deadline(self) -> None:
        if self._done.wait(self._budget) or self._deadline_event.is_set():
            return
        self._exit(f"the call in flight did not return within {self._budget:.1f}s of SIGTERM")

    def _exit(self, why: str) -> None:
        if self._done.is_set() or self._deadline_event.is_set():
            return  # serving ended meanwhile: the graceful path finishes on its own
        try:
            self._abandon()
        except Exception:
            pass
        try:
            sys.stdout.flush()
        except Exception:
            pass
        try:
            os.write(
                2,
                f"RLMesh server terminated: {why}; the listener is closed and the unix socket file "
                f"removed, the env was not closed ({self._what})\n".encode(errors="replace"),
            )
        except OSError:
            pass
        os._exit(EXIT_TERMINATED)
