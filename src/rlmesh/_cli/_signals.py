"""SIGTERM, the same way for every command: stop, keep what is done, exit 143.

``kill``, ``docker stop``, SLURM and systemd stop a process with SIGTERM (and SIGKILL a
few seconds later). Every ``rlmesh`` command runs under :func:`sigterm_ends_command`:
the first SIGTERM raises :class:`Terminated` in the main thread, so the step in flight
is abandoned, ``finally`` blocks and the run's own ending run (a recording or journal
keeps every finished episode; ``rlmesh eval`` reports and writes the finished ones),
and the command exits with status 143 (128 + SIGTERM). A second SIGTERM while that
cleanup runs exits at once with 143. ``rlmesh serve`` and ``serve-model`` stop
gracefully on SIGTERM instead (drain, close the env) and exit 0, as documented there.

Why a handler at all when Python's default already dies on SIGTERM: a library the env
loads may take the signal over when nobody handles it. SDL (pygame, which renders
Gymnasium's classic-control envs) installs its own SIGTERM handler on first use when
the disposition is still the default, and turns the signal into an event nobody reads;
a recorded or watched CartPole eval then ignored every SIGTERM. SDL leaves a handler
that is already installed alone, so installing ours first keeps SIGTERM ours.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["EXIT_TERMINATED", "TermState", "Terminated", "sigterm_ends_command"]

#: Exit status of a command that SIGTERM ended (128 + SIGTERM, what a shell reports).
EXIT_TERMINATED = 128 + 15


class Terminated(BaseException):
    """SIGTERM arrived: the command stops, keeping what it has finished.

    A ``BaseException`` (like ``KeyboardInterrupt``), so no ``except Exception`` on the way
    up swallows it. ``rlmesh_quit`` makes a run end as a viewer's "quit" does: with the
    episodes finished so far, which ``rlmesh eval`` then reports.
    """

    rlmesh_quit = True


class TermState:
    """What the handler saw: ``terminated`` once a SIGTERM arrived."""

    def __init__(self) -> None:
        self.terminated = False


@contextmanager
def sigterm_ends_command(name: str) -> Iterator[TermState]:
    """Within the block, SIGTERM raises :class:`Terminated` (the second one exits with 143).

    Off the main thread (a command run from a test's worker thread) nothing is installed:
    only the main thread may set signal handlers. The previous handler comes back on exit.
    """
    state = TermState()
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        yield state
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if state.terminated:  # the cleanup after the first one is taking too long
            sys.stderr.write(f"rlmesh {name}: second SIGTERM, exiting now\n")
            sys.stderr.flush()
            os._exit(EXIT_TERMINATED)
        state.terminated = True
        raise Terminated(f"rlmesh {name}: terminated (SIGTERM)")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)
