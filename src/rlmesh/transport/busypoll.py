"""The busy-poll policy: spin briefly for an answer instead of sleeping on it.

After a frame is sent, the first read of the answer may poll the socket (or the
shared-memory ring) without sleeping, for up to twice the recent answer time, capped
at ``busy_poll`` seconds, and only then block. A wake-up from a blocking read costs
several microseconds on a loaded VM; a request/reply loop whose peer answers within
the cap saves that on every exchange. When answers take longer than the cap (a slow
env or policy), or the process runs other Python threads (polling would hold the GIL
they need), the poll is skipped. This module decides *whether and how long*; the
socket stream and the ring adapter do the polling.

An answer that arrives after a sleep is timed with the wake-ups in it (this end's,
and the peer's when the peer slept too), so a pair that both fell asleep would
measure each other as slow and never poll again. Hence, while polling is off, one
read in ``PROBE_EVERY`` polls once at the full cap: an answer caught by polling is
timed exactly, and one such answer within the cap turns polling back on. A probe
that catches nothing doubles the gap to the next (up to ``PROBE_EVERY_MAX``), so a
peer that really is slow costs next to nothing.
"""

from __future__ import annotations

import os
import socket
import threading
import time

__all__ = ["FAN_OUT_CAPABILITY", "BusyPolling", "busy_poll_default", "quiet_threads"]

_BUSY_POLL_DEFAULT_US = (
    1000  # covers a trainer thinking between steps and a few-lane step (issue 12)
)
PROBE_EVERY = (
    8  # while polling is off, one read in this many polls anyway (it may be a sleeping pair) ...
)
PROBE_EVERY_MAX = 1024  # ... and each probe that catches nothing doubles the gap, up to this
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)
#: ``Hello.capabilities`` key a client sets to ``"true"`` when it steps several endpoints at
#: once (sends to all, then gathers): its server then waits for requests without spinning,
#: since a round takes as long as its slowest endpoint and endpoints spinning on a few
#: cores take the CPU the others need. Advisory (HS-8): a server may ignore it.
FAN_OUT_CAPABILITY = "rlmesh.client.fan_out.v1"
yield_cpu = getattr(os, "sched_yield", lambda: None)  # polling gives way to any other runnable task
#: Background threads that wait in the kernel nearly all the time and need the GIL only for
#: an instant now and then (the metrics port, its reporter): they do not switch polling off.
_QUIET = [0]


def quiet_threads(delta: int) -> None:
    """Count ``delta`` more (or fewer) quiet background threads (see :data:`_QUIET`)."""
    _QUIET[0] = max(0, _QUIET[0] + delta)


def busy_poll_default() -> float:
    """The busy-poll cap in seconds: ``RLMESH_BUSY_POLL_US`` (0 disables), else 1 ms.

    Polling only pays when the peer can run on another core, so it is off on a single-CPU
    machine or container (or where the platform has no ``MSG_DONTWAIT``).
    """
    raw = os.environ.get("RLMESH_BUSY_POLL_US", "").strip()
    try:
        us = float(raw) if raw else _BUSY_POLL_DEFAULT_US
    except ValueError:
        us = _BUSY_POLL_DEFAULT_US
    if us <= 0 or not _DONTWAIT:
        return 0.0
    return us / 1e6 if _usable_cpus() >= 2 else 0.0


def _usable_cpus() -> float:
    """CPUs the processes of this machine (or container) can use at once.

    The machine's count, capped by a cgroup v2 CPU quota. An affinity mask of one CPU
    does not count: a process pinned to one core usually talks to a peer pinned to
    another, and every polling pass yields the CPU anyway.
    """
    cpus: float = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:  # "max 100000" or "<quota> <period>"
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):
        pass
    return cpus


class BusyPolling:
    """The policy's state for one connection: the cap, and the moving answer time.

    Attributes:
        busy_poll: The cap in seconds (0 = off); set after a handshake.
    """

    __slots__ = ("_probe_gap", "_probe_in", "_probing", "_sent_at", "_wait", "busy_poll")

    def __init__(self) -> None:
        self.busy_poll = 0.0
        self._sent_at = 0.0  # perf_counter() of the last send while an answer is awaited
        self._wait = -1.0  # moving average of answer times (seconds); < 0 before the first
        self._probe_gap = PROBE_EVERY  # reads between probes while polling is off
        self._probe_in = PROBE_EVERY  # reads until the next probe
        self._probing = False  # the read in progress is a probe

    def sent_now(self) -> None:
        """A frame went out just now and its answer is awaited (busy polling times it)."""
        self._sent_at = time.perf_counter()

    @property
    def polling(self) -> bool:
        """Whether reads busy-poll now: enabled, and no other Python thread needs the GIL
        (a server started in-process, say) that polling would hold."""
        return bool(self.busy_poll) and threading.active_count() <= 1 + _QUIET[0]

    def _budget(self) -> float:
        cap = self.busy_poll
        if not self.polling:
            return 0.0
        wait = self._wait
        if wait < 0:
            return cap
        if wait < cap:
            return min(cap, 2.0 * wait)
        if self._probing:  # back after a probe ran dry on a non-blocking socket: it caught nothing
            self._probe_ended(False)
            return 0.0
        self._probe_in -= 1  # answers seem to take longer than polling may burn ...
        if self._probe_in > 0:
            return 0.0
        self._probing = True
        return cap  # ... but the times may include wake-ups: probe once

    def _answered(self, seconds: float, caught: bool = False) -> None:
        """Record an answer's time; ``caught``: it arrived while polling (timed exactly)."""
        self._sent_at = 0.0
        cap = self.busy_poll
        wait = self._wait
        if self._probing:
            self._probe_ended(caught)
        if caught and wait >= cap:  # a probe caught it: the slow times were wake-ups, poll again
            self._wait = seconds
            return
        limit = 4.0 * cap  # one long answer must not switch polling off for long
        sample = seconds if seconds < limit else limit
        self._wait = sample if wait < 0 else wait + (sample - wait) * 0.125

    def _probe_ended(self, caught: bool) -> None:
        """A probe ended: the next comes soon if it caught the answer, else twice as late."""
        self._probing = False
        self._probe_gap = PROBE_EVERY if caught else min(2 * self._probe_gap, PROBE_EVERY_MAX)
        self._probe_in = self._probe_gap
