"""A session worker: build one env, serve one handed-over session, close the env, exit.

The supervisor starts each worker with :class:`rlmesh._spawn.process.Spawner` (a clean
process: the user's ``__main__`` never runs here) as ``worker_main([ctrl, board],
spec_bytes, slot, sessions)``. The worker builds its env from the :class:`SessionSpec`,
warms the handshake, says :class:`Ready` and blocks until the supervisor hands it a
client (:class:`Handover`, the socket passed with ``SCM_RIGHTS``) or says :class:`Stop`.
It then answers the client's ``Hello`` itself and serves the session through the
single-session serve loop (:class:`_SessionLoop`), so a step pays nothing for the
supervisor. When the session ends, the worker closes its env (within the close budget)
and exits: the next client always gets a fresh env.

Signals: SIGINT is ignored (Ctrl-C reaches the whole process group; the supervisor
decides); SIGTERM stops the session loop (drain, close) or, before a session, the worker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..._spawn.pickling import loads
from ..._spawn.process import usable_cpus
from ..._spawn.recipe import close_quietly
from ...transport.busypoll import busy_poll_default
from ...transport.connection import Connection
from ...wire import frames, handshake, messages as m
from .._driver import RequestFailed
from .._framework import resolve_framework
from .._loop import ServeLoop, _Peer
from .._metrics import start_reports
from .._options import ServeOptions
from .._server import _env_service
from . import control
from .control import (
    ACTIVE_SECONDS,
    Board,
    Counts,
    Failed,
    Handover,
    Ready,
    SessionSpec,
    ShutdownAsked,
    Stop,
)

__all__ = ["watch_activity", "worker_main"]

log = logging.getLogger("rlmesh.serve")

_TAIL_LINES = 12  # lines of a failed build's traceback sent to the supervisor


class _Stopped(Exception):
    """SIGTERM while a worker waits for its session (before its loop exists)."""


class _SessionLoop(ServeLoop):
    """The serve loop, for one handed-over connection; its "listener" is the control channel."""

    def __init__(
        self,
        ctrl: socket.socket,
        service: Any,
        options: ServeOptions,
        sock: socket.socket,
        first: Handover,
    ) -> None:
        super().__init__(ctrl, service, options)
        sock.setblocking(False)
        self.client = _Peer(
            Connection(sock, frames.PRE_HANDSHAKE_LIMITS), self.limits.max_frame_bytes
        )
        self._peers[sock.fileno()] = self.client
        self._sel.register(sock, self.client)
        self._first = first

    def run(self) -> None:
        first = self._first
        try:  # answer the Hello the supervisor received for us
            self._dispatch(
                self.client,
                frames.Frame(first.kind, first.request_id, memoryview(first.header), []),
            )
        except BaseException:
            self._teardown()
            raise
        if self._stop.is_set():
            self._teardown()
            return
        super().run()

    def _accept(self) -> None:  # the control channel is readable: a stop, or the supervisor is gone
        try:
            msg, fds = control.recv(self.listener)
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, control.ControlError):  # a channel that says nonsense is no supervisor
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self.stop("the endpoint's supervisor is gone")
        elif isinstance(msg, Stop):
            self.stop(msg.reason)

    def _drop(self, peer: _Peer) -> None:
        super()._drop(peer)
        if peer is self.client:
            self.stop("session ended")  # one session per worker: its end is the worker's

    def _shutdown_request(self, peer: _Peer, msg: m.Shutdown, rid: int) -> None:
        if not self.options.remote_shutdown_allowed():
            super()._shutdown_request(peer, msg, rid)
            return
        reason = (msg.reason or "").strip()
        text = f"shutdown accepted: {reason}" if reason else "shutdown accepted"
        self._send(peer, m.ShutdownReply(accepted=True, message=text), rid)
        try:  # the supervisor stops the whole endpoint (this worker included)
            control.send(self.listener, ShutdownAsked(reason))
        except OSError:
            self.stop("remote shutdown")


def _close_with_budget(closer: Callable[[], None], seconds: float, what: str) -> None:
    done = threading.Event()

    def run() -> None:
        try:
            closer()
        except Exception as exc:
            log.warning("session worker %d: closing %s failed: %s", os.getpid(), what, exc)
        finally:
            done.set()

    threading.Thread(target=run, name="rlmesh-session-close", daemon=True).start()
    if not done.wait(seconds):
        log.warning(
            "session worker %d: %s did not close within %.1fs; exiting anyway",
            os.getpid(),
            what,
            seconds,
        )


def _warm_handshake(service: Any) -> None:
    """Run the handshake's first-call work (peer info, the contract's encoding) before the
    worker says it is ready, so a prewarmed worker answers its client's ``Hello`` at once."""
    try:
        hello = handshake.make_hello(
            "rlmesh-warmup", service.declared_edition, service=service.service
        )
        welcome = handshake.answer_hello(
            hello,
            declared=service.declared_edition,
            service=service.service,
            component=service.component,
            session_id="warmup",
            contract=service.contract(),
            capabilities=None,
        )
        m.encode_message(welcome, 1)
    except Exception:  # only a warm-up: the real handshake reports any problem
        pass


def _log_fatal_failures(service: Any) -> None:
    """Log the env's traceback tail when a request ends the session (the client gets the message only).

    Wraps both ways in: ``handle`` (every request) and ``step`` (the serve loop's straight
    road for a ``Step``), so a crash in either is logged the same way.
    """

    def _logging(call: Callable[..., Any]) -> Callable[..., Any]:
        def logged(msg: Any, arg: Any) -> Any:
            try:
                return call(msg, arg)
            except RequestFailed as failure:
                cause = failure.__cause__ or failure.__context__
                if not failure.recoverable and cause is not None:
                    lines = traceback.format_exception(type(cause), cause, cause.__traceback__)
                    tail = "".join("".join(lines).splitlines(keepends=True)[-_TAIL_LINES:])
                    log.error(
                        "%s; the session ends. The env's traceback (tail):\n%s",
                        failure.message,
                        tail.rstrip(),
                    )
                raise

        return logged

    service.handle = _logging(service.handle)
    if getattr(service, "step", None) is not None:
        service.step = _logging(service.step)


def watch_activity(loop: _SessionLoop, board: Board, slot: int) -> None:
    """Busy-poll only while the busy sessions leave a core each for their worker and client.

    Busy polling buys a few microseconds per step when the peer runs on another core; with
    more busy sessions than the cores can hold, a worker spinning for its next request
    takes the CPU its own client (or another session) needs (measured: 4 busy sessions on
    2 cores ran at 0.7x one session's steps/s with polling, 2.4x without). Every worker
    stamps its slot of the shared :class:`Board` per request and, every
    ``ACTIVE_SECONDS``, counts the busy ones; idle sessions do not count.
    """
    cap = busy_poll_default()
    if not cap:
        return
    cpus = usable_cpus()
    conn = loop.client.conn
    monotonic = time.monotonic
    next_check = [0.0]

    def on_request() -> None:
        now = monotonic()
        board[slot] = now
        if now >= next_check[0]:
            next_check[0] = now + ACTIVE_SECONDS
            conn.busy_poll = cap if 2 * board.busy(now) <= cpus and not loop.fan_out_peer else 0.0

    loop.on_request = on_request


def _build(spec_bytes: bytes) -> tuple[SessionSpec, Any, Any, Any]:
    """``(spec, service, view, built)``: the env built and wrapped for the serve loop."""
    spec: SessionSpec = loads(spec_bytes)
    built = spec.recipe.build()
    try:
        bridge, dev = resolve_framework(spec.framework, spec.device)
        service, view = _env_service(built.env, spec.options, built.tags, bridge, dev)
    except BaseException:
        built.close()
        raise
    return spec, service, view, built


def _wait_for_client(ctrl: socket.socket) -> tuple[Handover, socket.socket] | None:
    """Block until the supervisor hands a client over (``None``: told to stop, or it is gone)."""
    while True:
        try:
            msg, fds = control.recv(ctrl)
        except control.ControlError as exc:
            log.error("session worker %d: %s; exiting", os.getpid(), exc)
            return None
        if isinstance(msg, Handover) and len(fds) == 1:
            return msg, socket.socket(fileno=fds[0])
        for fd in fds:
            os.close(fd)
        if msg is None or isinstance(msg, Stop):
            return None


def worker_main(fds: list[int], spec_bytes: bytes, slot: int, sessions: int) -> None:
    """A session worker's body (see the module docstring); ``fds`` is ``[ctrl, board]``."""
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C reaches the process group: the supervisor decides
    loops: list[_SessionLoop] = []

    def on_term(signum: int, frame: Any) -> None:
        if loops:
            loops[0].stop("terminated")
        else:
            raise _Stopped

    signal.signal(signal.SIGTERM, on_term)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING,
            format=f"rlmesh session worker {os.getpid()}: %(levelname)s %(message)s",
        )
    ctrl = socket.socket(fileno=fds[0])
    board = Board(sessions, fds[1]) if len(fds) > 1 else None
    spec: SessionSpec | None = None
    built: Any = None
    view: Any = None
    try:
        try:
            spec, service, view, built = _build(spec_bytes)
        except _Stopped:
            raise
        except BaseException as exc:
            tail = "".join(traceback.format_exc().splitlines(keepends=True)[-_TAIL_LINES:])
            try:
                control.send(ctrl, Failed(f"{type(exc).__name__}: {exc}", tail))
            except OSError:
                pass
            return
        _log_fatal_failures(service)
        _warm_handshake(service)
        try:
            control.send(ctrl, Ready(os.getpid(), service.env_contract.to_dict()))
        except OSError:  # the supervisor is gone while the env was being built
            return
        client = _wait_for_client(ctrl)
        if client is None:
            return
        first, sock = client
        loop = _SessionLoop(ctrl, service, spec.options, sock, first)
        loops.append(loop)
        if board is not None:
            watch_activity(loop, board, slot)
        # metrics on: the counts go to the supervisor each second, and before the channel closes
        loop.on_teardown = start_reports(loop._meter, lambda c: control.send(ctrl, Counts(c)))
        loop.run()
        if loop.stop_reason not in ("session ended", None):
            log.info("session ended (%s)", loop.stop_reason)
    except _Stopped:
        pass
    finally:
        if spec is not None and spec.close_env:
            seconds = spec.options.close_seconds()
            if view is not None:
                _close_with_budget(view.close, seconds, "the env")
            elif built is not None:
                _close_with_budget(lambda: close_quietly(built.env), seconds, "the env")
        closer = getattr(built.factory, "close", None) if built is not None else None
        if callable(closer):
            seconds = spec.options.close_seconds() if spec is not None else 5.0
            _close_with_budget(closer, seconds, "the env factory")
        if board is not None:
            board.close()
        ctrl.close()
