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
(:mod:`rlmesh.serve._sessions.control`) and its process.

A worker is a process (started by :class:`rlmesh._spawn.process.Spawner`: never the
user's ``__main__``) that built its own env from the endpoint's :class:`SessionSpec`.
On a client's ``Hello`` the supervisor passes the accepted socket and the ``Hello``
frame to a ready worker (``SCM_RIGHTS``); the worker answers the ``Hello`` itself and
from then on the client talks to it directly (:mod:`.worker`). A worker serves one
session, then exits; ``prewarm=K`` keeps K workers with a built env waiting.

**The supervisor never waits for a worker.** Everything it learns about one arrives on
its poller: the fork server's answer to a start (:meth:`Spawner.launch`), the worker's
control messages, and its *sentinel*, which turns readable when the process has exited.
A worker whose session ended but whose env is still closing (seconds, for a heavy
simulator) is *exiting*: it keeps its slot until its process is gone, so the env
processes of an endpoint never exceed ``sessions``, and its exit status, read then, says
whether it ended cleanly (a slow clean exit is no crash).

The limit counts processes: serving, exiting, ready and starting workers never exceed
``sessions``. Client N+1 gets ``Busy`` (``EndpointBusy``, naming the limit). A worker
that dies ends only its own session: its client sees the connection drop, the
supervisor logs how the worker ended and the slot is free again. A worker that cannot
become ready -- its env fails to build (it says so) or it dies first (a segfault, the
OOM killer) -- is an error for the client waiting for it, and prewarming backs off
(0.5 s doubling to 30 s), with one log line per streak of failures. A control message
that cannot be believed ends that worker, never the loop. Stopping asks every worker to
stop (each drains its request in flight and closes its env); a worker still running
after the drain and close budget is killed.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import time
from typing import Any, cast

from ..._spawn.pickling import dumps
from ..._spawn.process import (
    START_TIMEOUT_SECONDS,
    Spawner,
    describe_exit,
    guard_at_exit,
    stop_processes,
)
from ...errors import CODE_NUMBERS, ProtocolException
from ...transport.reactor import overdue
from ...wire import frames, messages as m
from .._loop import HANDSHAKE_DEADLINE_SECONDS, ServeLoop, _accepted_at, _Peer
from .._metrics import Reports
from .._tls_relay import Relays, TLSRelay
from . import control
from .backoff import Backoff
from .books import NoEnv, Watch, Worker
from .control import Board, Handover, SessionSpec

__all__ = ["WORKER_ENTRY", "SessionSupervisor"]

log = logging.getLogger("rlmesh.serve")

#: The session worker's body, started by name in each worker process.
WORKER_ENTRY = "rlmesh.serve._sessions.worker:worker_main"


class SessionSupervisor(ServeLoop):
    """The serve loop for ``sessions=N``: one worker process per session (see the module docstring).

    Same control surface as :class:`ServeLoop` (``run``, ``stop``, ``stop_reason``,
    ``close_listener``, ``close_unstarted``), so the server's lifecycle drives it unchanged.
    """

    def __init__(
        self, listener: socket.socket, spec: SessionSpec, sessions: int, prewarm: int
    ) -> None:
        super().__init__(listener, NoEnv(), spec.options, limits=frames.PRE_HANDSHAKE_LIMITS)
        self.spec = spec
        self.sessions = sessions
        self.prewarm = prewarm
        self.contract: dict[str, Any] | None = None  # the first ready worker's env contract
        self.crashes = 0  # workers that ended without a clean exit (for tests and logs)
        self.started = 0  # workers started so far
        self.backoff = Backoff()  # prewarming's pause after workers in a row did not become ready
        self._spec_bytes = dumps(
            spec,
            "env recipe",
            who=f"sessions={sessions}",
            remedy="Pass a Gymnasium id, 'module:attr', an EnvFactory or an env class instead.",
        )
        # a worker may outlive a SIGKILLed supervisor by its own drain and close budget
        self._orphan_grace = self.options.drain_seconds() + self.options.close_seconds()
        self._workers: list[Worker] = []
        self._spawner: Spawner | None = None
        self._board: Board | None = None  # per-slot time of each session's last request
        self._frame: frames.Frame | None = None  # the request being dispatched (a Hello travels on)
        #: Clients whose Hello came while every slot was taken, one by an exiting worker.
        self._parked: list[tuple[_Peer, Handover]] = []
        if self._meter is not None:  # metrics: the workers report their counts here
            self._reports = Reports()
        self._relays = Relays(self._sel)  # TLS sessions whose bytes pass through here

    @property
    def in_use(self) -> int:
        """Sessions being served (their worker may still be closing the env), or waiting for their env."""
        return sum(1 for w in self._workers if w.served or w.waiting is not None)

    def _spare(self, w: Worker) -> bool:
        """A worker that may take the next client (ready, or starting for no one yet)."""
        return w.state in ("starting", "ready") and w.waiting is None and w.ctrl is not None

    def _free_slot(self) -> bool:
        return any(self._spare(w) for w in self._workers) or len(self._workers) < self.sessions

    # -- the loop (ServeLoop.run, with the supervisor's own events and chores) -----------------

    _ticking = True  # prewarming and the start deadline need the tick whatever the connections

    def _starting(self) -> None:
        self._replenish()

    def _poll_timeout(self, idle: float | None) -> float | None:
        if idle is not None and self.in_use:  # a session in a worker keeps it busy
            self._last_activity = time.monotonic()
        return super()._poll_timeout(idle)

    def _event(self, obj: Any) -> None:
        kind = type(obj)
        if kind is Worker:
            self._worker_event(obj)
        elif kind is Watch:
            self._watch_event(obj)
        elif kind is TLSRelay:
            self._relays.pump(obj)
        else:  # pragma: no cover - nothing else is registered
            super()._event(obj)

    def _tick(self, now: float) -> None:
        self._overdue_launches(now)
        if self.prewarm:
            self._replenish()  # after a paused prewarm (workers that failed to start)
        self._reap_pending()

    def _waiting_for(self, peer: _Peer) -> Worker | None:
        return next(
            (w for w in self._workers if w.waiting is not None and w.waiting[0] is peer), None
        )

    def _is_waiting(self, peer: _Peer) -> bool:
        """Whether ``peer`` said ``Hello`` and waits: for its worker's env, or for a slot."""
        return self._waiting_for(peer) is not None or any(p is peer for p, _ in self._parked)

    def _reap_pending(self) -> None:
        """Drop connections that said no ``Hello`` in time (not those waiting for a worker)."""
        self._release_held()  # refusals of wrong tokens whose time has come
        pending = [p for p in self._peers.values() if not self._is_waiting(p)]
        for peer in overdue(pending, _accepted_at, time.monotonic(), HANDSHAKE_DEADLINE_SECONDS):
            self._drop(peer)

    # -- the supervisor's own answers --------------------------------------------------------

    def _dispatch(self, peer: _Peer, frame: frames.Frame) -> None:
        if self._is_waiting(peer):
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
        spares = [w for w in self._workers if self._spare(w)]
        ready = [w for w in spares if w.state == "ready"]
        if ready:
            self._hand_over(ready[0], peer, first)
            return
        worker = spares[0] if spares else None
        if worker is None and len(self._workers) < self.sessions:
            worker = self._start_worker()
            if worker is None:
                self._refuse(peer, first.request_id, "a session worker could not be started")
                return
        if worker is not None:
            worker.waiting = (peer, first)
            self._replenish()
            return
        leaving = sum(1 for w in self._workers if w.state in ("exiting", "failed"))
        if len(self._parked) < leaving:  # a slot frees when that worker's process exits
            self._parked.append((peer, first))
            return
        busy = m.Busy(
            message=f"all {self.sessions} sessions of this endpoint are in use (sessions={self.sessions}); "
            "close another client, serve more sessions (--sessions), or connect with wait_for_slot=True "
            "to wait for a free one"
        )
        self._send(peer, busy, first.request_id)
        self._drop(peer)

    def _unpark(self) -> None:
        """Clients that arrived while a worker was exiting take the slots freed since."""
        while self._parked and len(self._workers) < self.sessions and not self._stopping:
            peer, first = self._parked.pop(0)
            if not peer.conn.closed:
                self._admit(peer, first)

    def _refuse(self, peer: _Peer, rid: int, message: str) -> None:
        error = m.Error(code=CODE_NUMBERS["INTERNAL"], message=message, recoverable=False)
        self._send(peer, error, rid)
        self._drop(peer)

    def _hand_over(self, worker: Worker, peer: _Peer, first: Handover) -> None:
        conn = peer.conn
        if conn.closed or worker.ctrl is None:
            self._replenish()
            return
        sock = conn.sock
        # a TLS session stays here (its keys cannot travel): the worker gets a socket pair's end
        pair = (
            socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            if getattr(sock, "tls", False)
            else None
        )
        # the worker may answer the Hello before send() returns here: count its session first
        worker.state, worker.served = "serving", True
        try:
            control.send(worker.ctrl, first, [(pair[1] if pair else sock).fileno()])
        except OSError as exc:
            log.warning("handing a session to worker %d failed (%s)", worker.pid, exc)
            for end in pair or ():
                end.close()
            self._refuse(peer, first.request_id, "the session could not be started")
            self._end_worker(worker, "its session could not be handed over")
            return
        # the worker owns the connection now: forget this process's copy without touching the stream
        self._sel.unregister(sock)
        self._peers.pop(sock.fileno(), None)
        conn.closed = True
        if pair is not None:
            pair[1].close()
            self._relays.add(TLSRelay(sock, pair[0]))
        else:
            try:
                sock.close()
            except OSError:
                pass
        self._touch()
        self._replenish()

    def _drop(self, peer: _Peer) -> None:
        worker = self._waiting_for(peer)
        if worker is not None:
            worker.waiting = None
        self._parked = [(p, first) for p, first in self._parked if p is not peer]
        super()._drop(peer)

    # -- workers: starting ------------------------------------------------------------------

    def _new_spawner(self) -> Spawner:
        """How workers start (a seam: in-process tests run the worker body on threads)."""
        return Spawner(preload=("rlmesh.serve._sessions.worker",))

    def _start_worker(self) -> Worker | None:
        """Ask for a worker process; it exists once the fork server answers (on the poller)."""
        if self._spawner is None:
            self._spawner = self._new_spawner()
        if self._board is None:
            self._board = Board(self.sessions)
        used = {w.slot for w in self._workers}
        slot = next(i for i in range(self.sessions) if i not in used)
        self._board[slot] = 0.0
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            launch = self._spawner.launch(
                WORKER_ENTRY,
                (self._spec_bytes, slot, self.sessions),
                pass_fds=[child.fileno(), self._board.fd],
                name="rlmesh-session",
                orphan_grace=self._orphan_grace,
            )
        except Exception as exc:
            parent.close()
            log.error("could not start a session worker: %s", exc)
            return None
        finally:
            child.close()
        parent.setblocking(False)  # a worker that does not read never blocks the loop
        self.started += 1
        worker = Worker(launch, parent, slot)
        self._workers.append(worker)
        self._sel.register(parent, worker)
        guard_at_exit(self, _stop_at_exit)
        if launch.done():
            self._launched(worker)
        else:
            self._watch(worker, launch.fileno())
        return None if worker.state == "gone" else worker

    def _watch(self, worker: Worker, fd: int) -> None:
        if worker.watch is not None:
            self._sel.unregister(cast(socket.socket, worker.watch))
            worker.watch = None
        if fd >= 0:
            worker.watch = Watch(fd, worker)
            self._sel.register(cast(socket.socket, worker.watch), worker.watch)

    def _watch_event(self, watch: Watch) -> None:
        worker = watch.worker
        if worker.state == "gone":
            return
        if worker.proc is None:
            self._launched(worker)
        else:
            self._ended(worker)

    def _launched(self, worker: Worker) -> None:
        """The fork server answered: the worker runs (its payload sent), or it could not start."""
        launch, worker.launch = worker.launch, None
        self._watch(worker, -1)
        try:
            proc = launch.finish()
        except OSError as exc:
            self._forget(worker)
            self._failed_start(worker, f"the session worker could not start: {exc}")
            return
        worker.proc, worker.pid = proc, proc.pid or 0
        self._watch(worker, proc.sentinel)

    def _overdue_launches(self, now: float) -> None:
        for w in [w for w in self._workers if w.launch is not None]:
            if now - w.started_at > START_TIMEOUT_SECONDS:
                self._watch(w, -1)  # before its descriptor is closed
                w.launch.cancel()
                w.launch = None
                self._forget(w)
                self._failed_start(
                    w, f"no session worker started within {START_TIMEOUT_SECONDS:.0f}s"
                )

    def _replenish(self) -> None:
        """Keep ``prewarm`` workers ready (or starting, unclaimed), within the limit."""
        if self._stopping or time.monotonic() < self.backoff.until:
            return
        spare = sum(1 for w in self._workers if self._spare(w))
        while spare < self.prewarm and len(self._workers) < self.sessions:
            if self._start_worker() is None:
                return
            spare += 1

    def _failed_start(self, worker: Worker, refusal: str, logged: str = "") -> None:
        """A worker that will not become ready: back off (logging ``logged``, else the
        refusal, once per streak of failures); refuse its client (``refusal``)."""
        self.backoff.failed(logged or refusal, time.monotonic())
        if worker.waiting is not None:
            peer, first = worker.waiting
            worker.waiting = None
            self._refuse(peer, first.request_id, refusal)

    # -- workers: what they say, how they end ----------------------------------------------

    def _worker_event(self, worker: Worker) -> None:
        ctrl = worker.ctrl
        if ctrl is None or worker.state == "gone":
            return
        try:
            msg, fds = control.recv(ctrl)
        except (BlockingIOError, InterruptedError):
            return
        except control.ControlError as exc:
            self._end_worker(worker, f"it sent a control message that cannot be believed: {exc}")
            return
        except OSError:
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self._channel_closed(worker)
            return
        try:
            self._worker_said(worker, msg)
        except Exception as exc:  # a message of the right kind with the wrong insides
            self._end_worker(worker, f"its {type(msg).__name__} message cannot be read: {exc}")

    def _worker_said(self, worker: Worker, msg: control.Message) -> None:
        if isinstance(msg, control.Ready):
            if worker.state != "starting":
                raise ValueError(f"a Ready while {worker.state}")
            contract = dict(msg.contract)
            self.backoff.ready()
            worker.state = "ready"
            if self.contract is None:
                self.contract = contract
            if worker.waiting is not None:
                peer, first = worker.waiting
                worker.waiting = None
                self._hand_over(worker, peer, first)
        elif isinstance(msg, control.Failed):
            if worker.state != "starting":
                raise ValueError(f"a Failed while {worker.state}")
            worker.state = "failed"  # it exits by itself
            self._failed_start(
                worker,
                f"the env could not be built: {msg.error}",
                f"a session worker could not build the env: {msg.error}\n{str(msg.tail).rstrip()}",
            )
        elif isinstance(msg, control.ShutdownAsked):
            self.stop(f"remote shutdown: {msg.reason}" if msg.reason else "remote shutdown")
        elif isinstance(msg, control.Counts):
            if self._reports is not None:
                self._reports.update(worker.pid, msg.values)
        else:
            raise ValueError(f"a {type(msg).__name__} is the supervisor's message, not a worker's")

    def _channel_closed(self, worker: Worker) -> None:
        """The worker closed its channel: it is ending. Its slot stays taken until it exited."""
        self._close_ctrl(worker)
        if worker.state in ("ready", "serving"):
            worker.state = "exiting"

    def _close_ctrl(self, worker: Worker) -> None:
        ctrl, worker.ctrl = worker.ctrl, None
        if ctrl is not None:
            self._sel.unregister(ctrl)
            try:
                ctrl.close()
            except OSError:
                pass

    def _end_worker(self, worker: Worker, why: str) -> None:
        """A worker that misbehaves: killed; its slot is free once its process is gone."""
        log.warning("session worker %d: %s; stopping it", worker.pid, why)
        self._channel_closed(worker)  # it is ending: its slot stays taken until it exited
        if worker.proc is not None:
            worker.proc.kill()

    def _ended(self, worker: Worker) -> None:
        """The worker's process has exited (its sentinel turned readable): free its slot."""
        self._watch(worker, -1)  # before poll() closes the sentinel's descriptor
        code = worker.proc.poll()
        was = worker.state
        self._forget(worker)
        if was == "starting":  # it died before it was ready (a segfault, the OOM killer)
            self._failed_start(
                worker,
                f"the session worker died while starting ({describe_exit(code)})",
                f"a session worker {describe_exit(code)} before its env was ready",
            )
            self.crashes += 1  # counted after the log line: a test that waits for it sees both
        elif code != 0 and was != "failed":
            what = "its session ended" if worker.served else "it served no session"
            log.warning(
                "session worker %d %s; %s (the endpoint keeps serving the others)",
                worker.pid,
                describe_exit(code),
                what,
            )
            self.crashes += 1
        if worker.waiting is not None:
            peer, first = worker.waiting
            worker.waiting = None
            self._refuse(peer, first.request_id, "the session worker died while starting")
        self._touch()
        self._unpark()
        self._replenish()

    def _forget(self, worker: Worker) -> None:
        worker.state = "gone"
        if self._reports is not None:
            self._reports.retire(worker.pid)  # its counts stay in the endpoint's totals
        self._close_ctrl(worker)
        if worker in self._workers:
            self._workers.remove(worker)

    # -- the end ----------------------------------------------------------------------------

    def _teardown(self) -> None:
        for peer in list(self._peers.values()):
            self._drop(peer)
        self._relays.close()
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
            if w.ctrl is not None:
                try:
                    control.send(w.ctrl, control.Stop(reason))
                except OSError:
                    pass
        # a little inside shutdown()'s own wait (drain + close), so it sees the workers gone
        budget = max(1.0, self.options.drain_seconds() + self.options.close_seconds() - 1.0)
        deadline = time.monotonic() + budget
        procs = []
        for w in workers:
            self._watch(w, -1)
            if w.launch is not None:  # started, not yet running: it reads its Stop first
                launch, w.launch = w.launch, None
                try:
                    if launch.done() or _readable(launch, deadline - time.monotonic()):
                        w.proc = launch.finish()
                    else:
                        launch.cancel()
                except OSError:
                    pass
            if w.proc is not None:
                procs.append(w.proc)
        left = max(0.0, deadline - time.monotonic())
        for proc in stop_processes(procs, grace=left, term_grace=0.0):
            log.warning("session worker %d did not stop in time; it was killed", proc.pid)
        for w in workers:
            self._close_ctrl(w)
            w.state = "gone"


def _readable(launch: Any, seconds: float) -> bool:
    try:
        return bool(select.select([launch], [], [], max(0.0, seconds))[0])
    except (OSError, ValueError):
        return True


def _stop_at_exit(supervisor: SessionSupervisor) -> None:
    """The exit guard: at interpreter exit, no session worker outlives the endpoint."""
    if supervisor._workers:
        supervisor.stop_workers("interpreter exit")
    if supervisor._spawner is not None:
        supervisor._spawner.close()
        supervisor._spawner = None
