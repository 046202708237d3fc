"""The supervisor's books on its workers, and the service it serves itself (none)."""

from __future__ import annotations

import socket
import time
from typing import Any

from ...wire import frames, messages as m
from .._driver import RequestFailed
from .._loop import _Peer
from .control import Handover

__all__ = ["NoEnv", "Watch", "Worker"]


class Worker:
    """The supervisor's books on one worker process."""

    __slots__ = (
        "ctrl",
        "launch",
        "pid",
        "proc",
        "served",
        "slot",
        "started_at",
        "state",
        "waiting",
        "watch",
    )

    def __init__(self, launch: Any, ctrl: socket.socket, slot: int) -> None:
        self.slot = slot
        self.launch = launch  # until the process exists (then ``proc``)
        self.proc: Any = None
        self.ctrl: socket.socket | None = ctrl
        self.pid = 0
        # starting -> ready -> serving -> exiting -> gone; failed: said its env cannot be built
        self.state = "starting"
        self.served = False  # it took a client: its slot counts as a session until it exits
        #: A client whose Hello waits for this worker (its env is still being built).
        self.waiting: tuple[_Peer, Handover] | None = None
        self.watch: Watch | None = None  # the launch, then the sentinel, on the poller
        self.started_at = time.monotonic()


class Watch:
    """A worker's start (the fork server answered) or end (its sentinel), on the poller."""

    __slots__ = ("fd", "worker")

    def __init__(self, fd: int, worker: Worker) -> None:
        self.fd = fd
        self.worker = worker

    def fileno(self) -> int:
        return self.fd


class NoEnv:
    """The supervisor's service: it serves no env itself (its workers do)."""

    service = "env"
    component = "rlmesh-env"
    declared_edition: str | None = None

    def contract(self) -> dict[str, Any]:
        """Empty: the supervisor answers no Hello itself (the serve loop asks once, for the
        metrics' lane count, when metrics are on: one lane)."""
        return {}

    def begin_session(self) -> None:  # pragma: no cover - no session is ever active here
        pass

    def end_session(self) -> list[m.EpisodeRecord]:
        return []

    def handle(self, msg: Any, frame: frames.Frame) -> tuple[Any, list[Any]]:  # pragma: no cover
        raise RequestFailed("UNSUPPORTED", "the endpoint's supervisor serves no env requests")
