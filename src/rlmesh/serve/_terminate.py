"""SIGTERM always ends a foreground server, even when the env call never returns (issue 28).

``serve()`` on the main thread handles SIGTERM gracefully: stop accepting, drain the
request in flight, ``env.close()``, remove the unix socket file, return. That needs the
env call in flight to return. When it does not, the process must still end: what sent
SIGTERM (Docker, systemd, Kubernetes, a test harness) expects it to.

:class:`TermWatch` is called by the SIGTERM handler. On the first SIGTERM it asks the
loop to stop and starts a deadline thread for the budget (drain + close); if serving has
not ended when the budget runs out, it closes the listener, removes the unix socket file
this server created, says so on stderr and exits the process with status 143
(128 + SIGTERM). A second SIGTERM does that at once.

The thread starts only after the first SIGTERM: while serving, the process keeps a single
Python thread, which the transports' busy polling (and so the shared-memory fast path)
requires. Known limit: Python runs a signal handler between bytecodes of the main thread,
so an env call stuck inside an extension that never returns to the interpreter (and retries
on ``EINTR``) keeps the handler from running; only SIGKILL ends such a process.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

__all__ = ["EXIT_TERMINATED", "TermWatch"]

#: Exit status of a server that SIGTERM ended before serving could stop (128 + SIGTERM).
EXIT_TERMINATED = 128 + 15


class TermWatch:
    """Turns SIGTERM into a bounded stop: call :meth:`on_sigterm` from the signal handler.

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
        self._terms = 0
        self._deadline_event = threading.Event()

    def on_sigterm(self) -> None:
        """The SIGTERM handler's part: stop at the first, exit at the second (main thread)."""
        self._terms += 1
        if self._terms == 1:
            self._stop()
            threading.Thread(
                target=self._deadline, name="rlmesh-sigterm-deadline", daemon=True
            ).start()
        else:
            self._give_up("a second SIGTERM")

    def disarm(self) -> None:
        """Serving ended: a pending deadline does nothing (idempotent)."""
        self._deadline_event.set()

    def _deadline(self) -> None:
        if self._done.wait(self._budget) or self._deadline_event.is_set():
            return
        self._give_up(f"the call in flight did not return within {self._budget:.1f}s of SIGTERM")

    def _give_up(self, why: str) -> None:
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
