"""The supervisor of a multi-session endpoint: accept, answer probes, hand sessions to workers.

Theory of operation
-------------------
``EnvServer(target, sessions=N)`` binds the listener in the serving process, which
becomes a *supervisor*: it never builds an env. It is the serve loop
(:class:`~rlmesh.serve._loop.ServeLoop`) with the same connection handling -- accepting,
reading frames, the wire session's state table, queued replies, protocol errors, the
handshake deadline, ``Shutdown`` -- and three answers of its own: ``Ping`` is answered
with the sessions in use and the limit; ``Hello`` hands the client to a *session
worker*; the loop also watches every worker's control channel
(:mod:`rlmesh.serve._sessions.control`).

A worker is a process (started by :class:`rlmesh._spawn.process.Spawner`: never the
user's ``__main__``) that built its own env from the endpoint's :class:`SessionSpec`.
On a client's ``Hello`` the supervisor passes the accepted socket and the ``Hello``
frame to a ready worker (``SCM_RIGHTS``); the worker answers the ``Hello`` itself and
from then on the client talks to it directly (:mod:`.worker`). A worker serves one
session, then exits; ``prewarm=K`` keeps K workers with a built env waiting.

The limit counts processes: serving + ready + starting workers never exceed ``sessions``.
Client N+1 gets ``Busy`` (``EndpointBusy``, naming the limit). A worker that dies ends
only its own session: its client sees the connection drop, the supervisor logs how the
worker ended and the slot is free again. An env that fails to build is an error for the
client waiting for it, and prewarming backs off (doubling, up to 30 s). Stopping asks
every worker to stop (each drains its request in flight and closes its env); a worker
still running after the drain and close budget is killed.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from ..._spawn.pickling import dumps
from ..._spawn.process import Spawner, describe_exit, guard_at_exit, stop_processes
from ...errors import CODE_NUMBERS, ProtocolException
from ...transport.reactor import overdue
from ...wire import frames, messages as m
from .._driver import RequestFailed
from .._loop import HANDSHAKE_DEADLINE_SECONDS, ServeLoop, _accepted_at, _Peer
from .._metrics import Reports
from .._tls_relay import TLSRelay
from . import control
from .control import Board, Handover, SessionSpec

__all__ = ["WORKER_ENTRY", "SessionSupervisor"]

log = logging.getLogger("rlmesh.serve")

#: The session worker's body, started by name in each worker process.
WORKER_ENTRY = "rlmesh.serve._sessions.worker:worker_main"
#: The longest pause between prewarm attempts after envs failed to build in a row.
MAX_BUILD_BACKOFF_SECONDS = 30.0


class _Worker:
    """The supervisor's books on one worker process."""

    __slots__ = ("ctrl", "pid", "proc", "slot", "started_at", "state", "waiting")

    def __init__(self, proc: Any, ctrl: socket.socket, slot: int) -> None:
        self.slot = slot
        self.proc = proc
        self.ctrl = ctrl
        self.pid: int = proc.pid or 0
        self.state = "starting"  # starting -> ready -> serving -> gone (or failed)
        #: A client whose Hello waits for this worker (its env is still being built).
        self.waiting: tuple[_Peer, Handover] | None = None
        self.started_at = time.monotonic()


class _NoEnv:
    """The supervisor's service: it serves no env itself (its workers do)."""

    service = "env"
    component = "rlmesh-env"
    declared_edition: str | None = None

    def contract(
        self,
    ) -> dict[str, Any]:  # pragma: no cover - the supervisor answers no Hello itself
        return {}

    def begin_session(self) -> None:  # pragma: no cover - no session is ever active here
        pass

    def end_session(self) -> list[m.EpisodeRecord]:
        return []

    def handle(self, msg: Any, frame: frames.Frame) -> tuple[Any, list[Any]]:  # pragma: no cover
        raise RequestFailed("UNSUPPORTED", "the endpoint's supervisor serves no env requests")


class SessionSupervisor(ServeLoop):
    """The serve loop for ``sessions=N``: one worker process per session (see the module docstring).

    Same control surface as :class:`ServeLoop` (``run``, ``stop``, ``stop_reason``,
    ``close_listener``, ``close_unstarted``), so the server's lifecycle drives it unchanged.
    """

    def __init__(
        self, listener: socket.socket, spec: SessionSpec, sessions: int, prewarm: int
    ) -> None:
        super().__init__(listener, _NoEnv(), spec.options, limits=frames.PRE_HANDSHAKE_LIMITS)
        self.spec = spec
        self.sessions = sessions
        self.prewarm = prewarm
        self.contract: dict[str, Any] | None = None  # the first ready worker's env contract
        self.crashes = 0  # workers that ended without a clean exit (for tests and logs)
        self.started = 0  # workers started so far
        self._spec_bytes = dumps(
            spec,
            "env recipe",
            who=f"sessions={sessions}",
            remedy="Pass a Gymnasium id, 'module:attr', an EnvFactory or an env class instead.",
        )
        self._workers: list[_Worker] = []
        self._spawner: Spawner | None = None
        self._board: Board | None = None  # per-slot time of each session's last request
        self._frame: frames.Frame | None = None  # the request being dispatched (a Hello travels on)
        self._build_failures = 0  # in a row; prewarming pauses after each (doubling, capped)
        self._prewarm_after = 0.0  # time.monotonic() before which no worker is prewarmed
        if self._meter is not None:  # metrics: the workers report their counts here
            self._reports = Reports()
        self._relays: set[TLSRelay] = set()  # TLS sessions whose bytes pass through here

    @property
    def in_use(self) -> int:
        """Sessions being served, or waiting for their worker's env."""
        return sum(1 for w in self._workers if w.state == "serving" or w.waiting is not None)

    def _free_slot(self) -> bool:
        return (
            any(w.state != "serving" and w.waiting is None for w in self._workers)
            or len(self._workers) < self.sessions
        )

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        sel = self._sel
        self.listener.setblocking(False)
        sel.register(self.listener, self.listener)
        wake = self._waker.reader
        sel.register(wake, wake)
        self._last_activity = time.monotonic()
        idle = self.options.idle_timeout_seconds
        next_tick = time.monotonic() + 1.0
        try:
            self._replenish()
            while not self._stopping:
                timeout = 1.0
                if idle is not None:
                    if self.in_use:  # a session in a worker keeps the endpoint busy
                        self._last_activity = time.monotonic()
                    remaining = idle - (time.monotonic() - self._last_activity)
                    if remaining <= 0:
                        self.stop("idle timeout")
                        break
                    timeout = min(timeout, remaining)
                for obj in sel.poll(timeout):
                    if obj is self.listener:
                        self._accept()
                    elif obj is wake:
                        self._waker.drain()
                    elif type(obj) is _Worker:
                        self._worker_event(obj)
                    elif type(obj) is TLSRelay:
                        self._pump(obj)
                    else:
                        if obj.conn.backlog:
                            self._writable(obj)
                        self._readable(obj)
                    if self._stopping:
                        break
                now = time.monotonic()
                if now >= next_tick:
                    next_tick = now + 1.0
                    if self.prewarm:
                        self._replenish()  # after a paused prewarm (an env that failed to build)
                    self._reap_pending()
        finally:
            self._teardown()

    def _waiting_for(self, peer: _Peer) -> _Worker | None:
        return next(
            (w for w in self._workers if w.waiting is not None and w.waiting[0] is peer), None
        )

    def _reap_pending(self) -> None:
        """Drop connections that said no ``Hello`` in time (not those waiting for a worker)."""
        self._release_held()  # refusals of wrong tokens whose time has come
        pending = [p for p in self._peers.values() if self._waiting_for(p) is None]
        for peer in overdue(pending, _accepted_at, time.monotonic(), HANDSHAKE_DEADLINE_SECONDS):
            self._drop(peer)

    # -- the supervisor's own answers --------------------------------------------------------

    def _dispatch(self, peer: _Peer, frame: frames.Frame) -> None:
        if self._waiting_for(peer) is not None:
            self._protocol_error(
                peer, ProtocolException("a request arrived before the handshake was answered")
            )
            return
        self._frame = frame
        try:
            super()._dispatch(peer, frame)
        finally:
            self._frame = None

    def _ping(self, peer: _Peer, msg: m.Ping, rid: int) -> None:
        state = "ready" if self._free_slot() else "busy"
        self._send(peer, self._pong(state, self.in_use, self.sessions), rid)

    def _hello(self, peer: _Peer, hello: m.Hello, rid: int) -> None:
        frame = self._frame
        assert frame is not None
        conn = peer.conn
        if conn.buffered or conn.backlog:  # those bytes would stay here, not reach the worker
            self._protocol_error(
                peer, ProtocolException("a request arrived before the handshake was answered"), rid
            )
            return
        self._admit(peer, Handover(frame.kind, rid, bytes(frame.header)))

    def _admit(self, peer: _Peer, first: Handover) -> None:
        ready = [w for w in self._workers if w.state == "ready" and w.waiting is None]
        if ready:
            self._hand_over(ready[0], peer, first)
            return
        starting = [w for w in self._workers if w.state == "starting" and w.waiting is None]
        worker = starting[0] if starting else None
        if worker is None and len(self._workers) < self.sessions:
            worker = self._start_worker()
        if worker is not None:
            worker.waiting = (peer, first)
            self._replenish()
            return
        busy = m.Busy(
            message=f"all {self.sessions} sessions of this endpoint are in use (sessions={self.sessions}); "
            "close another client, serve more sessions (--sessions), or connect with wait_for_slot=True "
            "to wait for a free one"
        )
        self._send(peer, busy, first.request_id)
        self._drop(peer)

    def _refuse(self, peer: _Peer, rid: int, message: str) -> None:
        error = m.Error(code=CODE_NUMBERS["INTERNAL"], message=message, recoverable=False)
        self._send(peer, error, rid)
        self._drop(peer)

    def _hand_over(self, worker: _Worker, peer: _Peer, first: Handover) -> None:
        conn = peer.conn
        if conn.closed:
            self._replenish()
            return
        sock = conn.sock
        # a TLS session stays here (its keys cannot travel): the worker gets a socket pair's end
        pair = (
            socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            if getattr(sock, "tls", False)
            else None
        )
        try:
            control.send(worker.ctrl, first, [(pair[1] if pair else sock).fileno()])
        except OSError as exc:
            log.warning("handing a session to worker %d failed (%s)", worker.pid, exc)
            for end in pair or ():
                end.close()
            self._refuse(peer, first.request_id, "the session could not be started")
            return
        worker.state = "serving"
        # the worker owns the connection now: forget this process's copy without touching the stream
        self._sel.unregister(sock)
        self._peers.pop(sock.fileno(), None)
        conn.closed = True
        if pair is not None:
            pair[1].close()
            self._relay(TLSRelay(sock, pair[0]))
        else:
            try:
                sock.close()
            except OSError:
                pass
        self._touch()
        self._replenish()

    def _relay(self, relay: TLSRelay) -> None:
        """Carry a handed-over TLS session's bytes from here on (the supervisor's loop)."""
        self._relays.add(relay)
        for end in relay.fds():
            self._sel.register(end, relay)
        self._pump(relay)

    def _pump(self, relay: TLSRelay) -> None:
        if relay.pump():
            relay.watch(self._sel)
            return
        self._relays.discard(relay)  # either side ended: the session is over
        for end in relay.fds():
            self._sel.unregister(end)
        relay.close()

    def _drop(self, peer: _Peer) -> None:
        worker = self._waiting_for(peer)
        if worker is not None:
            worker.waiting = None
        super()._drop(peer)

    # -- workers ----------------------------------------------------------------------------

    def _new_spawner(self) -> Spawner:
        """How workers start (a seam: in-process tests run the worker body on threads)."""
        return Spawner(preload=("rlmesh.serve._sessions.worker",))

    def _start_worker(self) -> _Worker | None:
        if self._spawner is None:
            self._spawner = self._new_spawner()
        if self._board is None:
            self._board = Board(self.sessions)
        used = {w.slot for w in self._workers}
        slot = next(i for i in range(self.sessions) if i not in used)
        self._board[slot] = 0.0
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = self._spawner.start(
                WORKER_ENTRY,
                (self._spec_bytes, slot, self.sessions),
                pass_fds=[child.fileno(), self._board.fd],
                name="rlmesh-session",
            )
        except Exception as exc:
            parent.close()
            log.error("could not start a session worker: %s", exc)
            return None
        finally:
            child.close()
        parent.settimeout(control.CTRL_SEND_SECONDS)
        self.started += 1
        worker = _Worker(proc, parent, slot)
        self._workers.append(worker)
        self._sel.register(parent, worker)
        guard_at_exit(self, _stop_at_exit)
        return worker

    def _replenish(self) -> None:
        """Keep ``prewarm`` workers ready (or starting, unclaimed), within the limit."""
        if self._stopping or time.monotonic() < self._prewarm_after:
            return
        spare = sum(
            1 for w in self._workers if w.state in ("starting", "ready") and w.waiting is None
        )
        while spare < self.prewarm and len(self._workers) < self.sessions:
            if self._start_worker() is None:
                return
            spare += 1

    def _worker_event(self, worker: _Worker) -> None:
        try:
            msg, fds = control.recv(worker.ctrl)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self._worker_gone(worker)
        elif isinstance(msg, control.Ready):
            self._build_failures = 0
            worker.state = "ready"
            if self.contract is None:
                self.contract = dict(msg.contract)
            if worker.waiting is not None:
                peer, first = worker.waiting
                worker.waiting = None
                self._hand_over(worker, peer, first)
        elif isinstance(msg, control.Failed):
            log.error(
                "a session worker could not build the env: %s\n%s", msg.error, msg.tail.rstrip()
            )
            self._build_failures += 1  # don't rebuild a failing env in a tight loop
            pause = min(0.5 * 2 ** (self._build_failures - 1), MAX_BUILD_BACKOFF_SECONDS)
            self._prewarm_after = time.monotonic() + pause
            if worker.waiting is not None:
                peer, first = worker.waiting
                worker.waiting = None
                self._refuse(peer, first.request_id, f"the env could not be built: {msg.error}")
            worker.state = "failed"
        elif isinstance(msg, control.ShutdownAsked):
            self.stop(f"remote shutdown: {msg.reason}" if msg.reason else "remote shutdown")
        elif isinstance(msg, control.Counts) and self._reports is not None:
            self._reports.update(worker.pid, msg.values)

    def _worker_gone(self, worker: _Worker) -> None:
        self._sel.unregister(worker.ctrl)
        try:
            worker.ctrl.close()
        except OSError:
            pass
        worker.proc.join(1.0)
        if self._reports is not None:
            self._reports.retire(worker.pid)  # its counts stay in the endpoint's totals
        code = worker.proc.exitcode
        was, worker.state = worker.state, "gone"
        if worker in self._workers:
            self._workers.remove(worker)
        if code not in (0, None) or (was == "serving" and code is None):
            self.crashes += 1
            log.warning(
                "session worker %d %s; its session ended (the endpoint keeps serving the others)",
                worker.pid,
                describe_exit(code),
            )
        if worker.waiting is not None:
            peer, first = worker.waiting
            worker.waiting = None
            self._refuse(peer, first.request_id, "the session worker died while starting")
        self._touch()
        self._replenish()

    # -- the end ----------------------------------------------------------------------------

    def _teardown(self) -> None:
        for peer in list(self._peers.values()):
            self._drop(peer)
        for relay in list(self._relays):
            for end in relay.fds():
                self._sel.unregister(end)
            relay.close()
        self._relays.clear()
        self.close_listener()  # new clients are refused at once while the sessions drain
        self.stop_workers(self.stop_reason or "stopped")
        super()._teardown()
        if self._spawner is not None:
            self._spawner.close()
            self._spawner = None
        if self._board is not None:
            self._board.close()
            self._board = None

    def stop_workers(self, reason: str) -> None:
        """Ask every worker to stop (each drains and closes its env); kill what outlives the budget."""
        workers = list(self._workers)
        self._workers.clear()
        for w in workers:
            try:
                control.send(w.ctrl, control.Stop(reason))
            except OSError:
                pass
        # a little inside shutdown()'s own wait (drain + close), so it sees the workers gone
        budget = max(1.0, self.options.drain_seconds() + self.options.close_seconds() - 1.0)
        for proc in stop_processes([w.proc for w in workers], grace=budget, term_grace=0.0):
            log.warning("session worker %d did not stop in time; it was killed", proc.pid)
        for w in workers:
            self._sel.unregister(w.ctrl)
            try:
                w.ctrl.close()
            except OSError:
                pass


def _stop_at_exit(supervisor: SessionSupervisor) -> None:
    """The exit guard: at interpreter exit, no session worker outlives the endpoint."""
    if supervisor._workers:
        supervisor.stop_workers("interpreter exit")
    if supervisor._spawner is not None:
        supervisor._spawner.close()
        supervisor._spawner = None
