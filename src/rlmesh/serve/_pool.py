"""Many sessions on one env endpoint: a supervisor and one worker process per session.

Theory of operation
-------------------
``EnvServer(target, sessions=N)`` (``rlmesh serve ENV --sessions N``) binds the
listener in the serving process, which becomes a *supervisor*: it never builds an
env. It accepts connections, answers what needs no session itself (``Ping`` with
the sessions in use and the limit, ``Shutdown``) and, on a client's ``Hello``,
hands the accepted socket to a *session worker*: a child process that built its
own env instance from the target. The socket travels over a unix
``SOCK_SEQPACKET`` pair with ``SCM_RIGHTS`` (:func:`socket.send_fds`) together
with the ``Hello`` frame's header, and the worker answers that ``Hello`` itself:
from then on the client talks to the worker directly, through today's
single-session serve loop (:class:`rlmesh.serve._loop.ServeLoop`), so a step pays
nothing for the supervisor, shared-memory rings work per session unchanged, and
sessions share no GIL. A worker serves exactly one session, then closes its env
and exits: the next client always gets a fresh env.

Workers are started from a ``multiprocessing`` *forkserver* that has already
imported rlmesh and Gymnasium, so a worker costs a ``fork()`` of a small clean
process (~10 ms here) plus the env's own build, not a new interpreter (~350 ms
with ``spawn``); the forkserver itself has no threads, so forking it is safe where
forking the serving process (threads, torch, jax) is not. ``prewarm=K`` keeps K
workers with a built env waiting, so a new client does not pay ``make()``.

Busy polling (``rlmesh.transport.busypoll``) pays only while each busy session has
a core for its worker and one for its client: workers stamp a shared board per
request and poll only while few enough sessions are busy (:func:`_watch_activity`).

The limit counts processes: serving + ready + starting workers never exceed
``sessions``. Client N+1 gets ``Busy`` (``EndpointBusy``, with the limit in the
message); a client that asked to wait (``wait_for_slot=True``) retries within its
connect timeout. A worker that dies (an env crash, ``kill -9``) ends only its own
session: its client sees the connection drop, the supervisor logs how the worker
ended (the worker has already logged the env's traceback) and the slot is free
again. Stopping (``shutdown()``, SIGTERM, a remote ``Shutdown``) asks every worker
to stop; each drains its request in flight and closes its env, a worker still
running after the drain and close budget is killed, the unix socket file is
removed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._autoreset import Autoreset
from .._build import PROTOCOL_GENERATION, resolve_declared_edition
from .._contract import EnvContract
from .._envkit.classify import Lanes, autoreset_name
from ..authoring import EnvFactory
from ..authoring._factory import build_env
from ..errors import CODE_NUMBERS, BindFailed, ConnectionLost, ProtocolException
from ..transport import listen, resolve_address
from ..transport.busypoll import _usable_cpus, busy_poll_default
from ..transport.connection import Connection
from ..transport.reactor import Poller, Waker, accept_ready, overdue
from ..wire import frames, handshake, messages as m
from ._command import _close_all, _gym_autoreset, load_env_target
from ._driver import RequestFailed
from ._framework import resolve_framework
from ._loop import (
    HANDSHAKE_DEADLINE_SECONDS,
    MAX_PENDING,
    STRANGER_BACKLOG_BYTES,
    ServeLoop,
    _accepted_at,
    _Peer,
)
from ._options import ServeOptions
from ._server import EnvServer, _env_service

__all__ = ["EnvRecipe", "SessionsEnvServer", "check_sessions", "serve_sessions"]

log = logging.getLogger("rlmesh.serve")

_CTRL_BYTES = (
    256 * 1024
)  # largest control message (a Hello header is bounded by PRE_HANDSHAKE_LIMITS)
_CTRL_SEND_SECONDS = 5.0
_TAIL_LINES = 12  # lines of a failed build's traceback the supervisor logs
#: How session workers start: ``forkserver`` where the platform has it, else ``spawn``;
#: ``RLMESH_SESSION_START_METHOD=spawn`` forces a fresh interpreter per worker.
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _start_method() -> str:
    chosen = os.environ.get("RLMESH_SESSION_START_METHOD", "").strip() or START_METHOD
    if chosen not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"RLMESH_SESSION_START_METHOD={chosen!r} is not a start method here; "
            f"use one of {multiprocessing.get_all_start_methods()}"
        )
    return chosen


_PRELOAD = ["rlmesh.serve._pool", "gymnasium", "numpy"]


def check_sessions(sessions: Any, prewarm: Any = 0) -> tuple[int, int]:
    """Validate ``sessions`` / ``prewarm``: ``(sessions, prewarm)`` or ``ValueError``/``TypeError``."""
    for name, value, low in (("sessions", sessions, 1), ("prewarm", prewarm, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if prewarm > sessions:
        raise ValueError(
            f"prewarm={prewarm} exceeds sessions={sessions}: at most sessions env instances exist at once"
        )
    return sessions, prewarm


def _is_live_env(obj: Any) -> bool:
    if isinstance(obj, (list, tuple)):
        return True
    return (
        not isinstance(obj, (str, type))
        and callable(getattr(obj, "reset", None))
        and callable(getattr(obj, "step", None))
    )


def _check_target(source: Any, sessions: int) -> None:
    """A live env (or a list of lane envs) cannot be copied into N worker processes."""
    if isinstance(source, EnvFactory):
        pass
    elif _is_live_env(source):
        what = (
            "a list of env instances"
            if isinstance(source, (list, tuple))
            else f"a live {type(source).__name__} instance"
        )
        raise TypeError(
            f"sessions={sessions} builds one env per session, so it needs something to build envs from; got "
            f"{what}, which cannot be copied. Pass a Gymnasium id ('CartPole-v1'), 'module:attr', an EnvFactory, "
            "or an env class / make callable instead (e.g. EnvServer('CartPole-v1', sessions=4)), or serve this "
            "instance with sessions=1"
        )
    elif not isinstance(source, str) and not callable(source):
        raise TypeError(
            f"sessions={sessions} needs a Gymnasium id, 'module:attr', an EnvFactory, or an env class / make "
            f"callable; got {type(source).__name__}"
        )
    try:
        pickle.dumps(source)
    except Exception as exc:
        raise TypeError(
            f"sessions={sessions} builds each session's env in its own process, which must be able to import the "
            f"target; {source!r} cannot be sent there ({type(exc).__name__}: {exc}). Use a Gymnasium id, "
            "'module:attr', or a class / function defined at module level (not a lambda or a local function)"
        ) from None


@dataclass
class EnvRecipe:
    """How a session worker builds its env (picklable: it travels to the worker process)."""

    source: Any
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)
    num_envs: int = 1
    vectorization_mode: str | None = None
    autoreset: str | None = None
    packages: Sequence[str] = ()
    tags: Any = None
    framework: Any = None
    device: Any = None
    options: ServeOptions = field(default_factory=ServeOptions)
    close_env: bool = True
    #: Instead of ``source``: a picklable no-argument callable returning ``(env_or_lanes,
    #: factory_or_None)`` (a sandbox's bootstrap builds from its spec this way).
    builder: Callable[[], tuple[Any, Any]] | None = None

    def build(self) -> tuple[Any, Any, Any]:
        """``(env_or_lanes, factory_or_None, tags)`` -- run in the worker."""
        if self.builder is not None:
            env, factory = self.builder()
            return env, factory, self.tags
        src = self.source
        if isinstance(src, str):
            env, factory = load_env_target(
                src,
                num_envs=self.num_envs,
                vectorization_mode=self.vectorization_mode,
                kwargs=self.make_kwargs,
                packages=self.packages,
                autoreset=self.autoreset,
            )
            return env, factory, self.tags
        if isinstance(src, EnvFactory) or (isinstance(src, type) and issubclass(src, EnvFactory)):
            cls: Any = src if isinstance(src, type) else type(src)
            factory, env = build_env(
                src,
                self.make_kwargs,
                num_envs=self.num_envs,
                vectorization_mode=self.vectorization_mode,
                autoreset=self.autoreset,
            )
            tags = self.tags
            if tags is None and not (cls.tag_params or self.vectorization_mode is not None):
                tags = cls.tags
            return env, factory, tags
        env = _build_plain(
            src,
            self.make_kwargs,
            num_envs=self.num_envs,
            vectorization_mode=self.vectorization_mode,
            autoreset=self.autoreset,
        )
        return env, None, self.tags


def _build_plain(
    source: Any,
    kwargs: Mapping[str, Any],
    *,
    num_envs: int,
    vectorization_mode: str | None,
    autoreset: str | None = None,
) -> Any:
    """A non-factory env source -> one env, :class:`Lanes` of lane envs, or a Gymnasium vector env."""
    if isinstance(source, str):
        return load_env_target(
            source,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            kwargs=kwargs,
            autoreset=autoreset,
        )[0]
    if (
        callable(getattr(source, "reset", None))
        and callable(getattr(source, "step", None))
        and not isinstance(source, type)
    ):
        if kwargs or num_envs != 1:
            raise ValueError(
                f"{type(source).__name__} is a live env; it takes no make kwargs and serves one env"
            )
        return source
    if not callable(source):
        raise TypeError(
            f"env_source must be an EnvFactory, a make callable, an env class, a live env or a target string; "
            f"got {type(source).__name__}"
        )
    if num_envs == 1:
        return source(**kwargs)
    mode = None if autoreset is None else autoreset_name(autoreset)
    if vectorization_mode is None:
        return Lanes(
            [source(**kwargs) for _ in range(num_envs)], mode or Autoreset.NEXT_STEP
        )  # like gymnasium.make_vec
    import gymnasium as gym

    thunks = [lambda: source(**kwargs) for _ in range(num_envs)]
    extra: dict[str, Any] = {} if mode is None else {"autoreset_mode": _gym_autoreset(mode)}
    if vectorization_mode == "sync":
        return gym.vector.SyncVectorEnv(thunks, **extra)
    return gym.vector.AsyncVectorEnv(thunks, **extra)


# -- control channel (supervisor <-> worker) ---------------------------------------------------


def _ctrl_send(sock: socket.socket, msg: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
    data = pickle.dumps(msg)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def _ctrl_recv(sock: socket.socket) -> tuple[tuple[Any, ...] | None, list[int]]:
    """One control message and the fds it carried; ``(None, [])`` at EOF."""
    data, fds, _flags, _addr = socket.recv_fds(sock, _CTRL_BYTES, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return pickle.loads(data), fds


# -- the worker side -----------------------------------------------------------------------------


class _Stop(Exception):
    """SIGTERM while a worker waits for its session (before its loop exists)."""


class _SessionLoop(ServeLoop):
    """Today's serve loop, for one handed-over connection; its "listener" is the control channel."""

    def __init__(
        self,
        ctrl: socket.socket,
        service: Any,
        options: ServeOptions,
        sock: socket.socket,
        first: tuple[int, int, bytes],
    ) -> None:
        super().__init__(ctrl, service, options)
        sock.setblocking(False)
        self._client = _Peer(
            Connection(sock, frames.PRE_HANDSHAKE_LIMITS), self.limits.max_frame_bytes
        )
        self._peers[sock.fileno()] = self._client
        self._sel.register(sock, self._client)
        self._first = first

    def run(self) -> None:
        kind, rid, header = self._first
        try:
            self._dispatch(
                self._client, frames.Frame(kind, rid, memoryview(header), [])
            )  # answers the Hello
        except BaseException:
            self._teardown()
            raise
        if self._stop.is_set():
            self._teardown()
            return
        super().run()

    def _accept(
        self,
    ) -> None:  # the control channel is readable: a stop request, or the supervisor is gone
        try:
            msg, fds = _ctrl_recv(self.listener)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self.stop("the endpoint's supervisor is gone")
        elif msg[0] == "stop":
            self.stop(str(msg[1]))

    def _drop(self, peer: _Peer) -> None:
        super()._drop(peer)
        if peer is self._client:
            self.stop("session ended")  # one session per worker: its end is the worker's

    def _shutdown_request(self, peer: _Peer, msg: m.Shutdown, rid: int) -> None:
        if not self.options.remote_shutdown_allowed():
            super()._shutdown_request(peer, msg, rid)
            return
        reason = (msg.reason or "").strip()
        text = f"shutdown accepted: {reason}" if reason else "shutdown accepted"
        self._send(peer, m.ShutdownReply(accepted=True, message=text), rid)
        try:  # the supervisor stops the whole endpoint (this worker included)
            _ctrl_send(self.listener, ("shutdown", reason))
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


#: A session counts as busy on the activity board while its last request is this recent.
ACTIVE_SECONDS = 0.05


def _watch_activity(loop: _SessionLoop, board: Any, slot: int) -> None:
    """Busy-poll only while the busy sessions leave a core each for their worker and client.

    Busy polling buys a few microseconds per step when the peer runs on another core; with
    more busy sessions than the cores can hold, a worker spinning for its next request
    takes the CPU its own client (or another session) needs (measured: 4 busy sessions on
    2 cores ran at 0.7x one session's steps/s with polling, 2.4x without). Every worker
    stamps its slot of a shared board per request and, every :data:`ACTIVE_SECONDS`,
    counts the busy ones; idle sessions do not count.
    """
    cap = busy_poll_default()
    if not cap:
        return
    cpus = _usable_cpus()
    conn = loop._client.conn
    monotonic = time.monotonic
    next_check = [0.0]

    def on_request() -> None:
        now = monotonic()
        board[slot] = now
        if now >= next_check[0]:
            next_check[0] = now + ACTIVE_SECONDS
            busy = sum(1 for t in board[:] if now - t < ACTIVE_SECONDS)
            conn.busy_poll = cap if 2 * busy <= cpus and not loop.fan_out_peer else 0.0

    loop.on_request = on_request


def _worker_main(ctrl: socket.socket, recipe: EnvRecipe, board: Any = None, slot: int = -1) -> None:
    """A session worker: build the env, say ready, serve one handed-over session, close, exit."""
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C reaches the whole process group: the supervisor decides
    loop_box: list[_SessionLoop] = []

    def on_term(signum: int, frame: Any) -> None:
        if loop_box:
            loop_box[0].stop("terminated")
        else:
            raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING,
            format=f"rlmesh session worker {os.getpid()}: %(levelname)s %(message)s",
        )
    env: Any = None
    factory: Any = None
    view: Any = None
    try:
        try:
            env, factory, tags = recipe.build()
            bridge, dev = resolve_framework(recipe.framework, recipe.device)
            service, view = _env_service(env, recipe.options, tags, bridge, dev)
        except _Stop:
            raise
        except BaseException as exc:
            tail = "".join(traceback.format_exc().splitlines(keepends=True)[-_TAIL_LINES:])
            try:
                _ctrl_send(ctrl, ("failed", f"{type(exc).__name__}: {exc}", tail))
            except OSError:
                pass
            return
        _log_fatal_failures(service)
        _warm_handshake(service)
        _ctrl_send(ctrl, ("ready", os.getpid(), service.env_contract.to_dict()))
        while True:
            msg, fds = _ctrl_recv(ctrl)  # blocks until the supervisor hands a client over
            if msg is None or msg[0] == "stop":
                for fd in fds:
                    os.close(fd)
                return
            if msg[0] == "session" and len(fds) == 1:
                break
            for fd in fds:
                os.close(fd)
        sock = socket.socket(fileno=fds[0])
        loop = _SessionLoop(ctrl, service, recipe.options, sock, (msg[1], msg[2], msg[3]))
        loop_box.append(loop)
        if board is not None and slot >= 0:
            _watch_activity(loop, board, slot)
        loop.run()
        if loop.stop_reason not in ("session ended", None):
            log.info("session ended (%s)", loop.stop_reason)
    except _Stop:
        pass
    finally:
        if view is not None and recipe.close_env:
            _close_with_budget(view.close, recipe.options.close_seconds(), "the env")
        elif env is not None and view is None and recipe.close_env:
            _close_with_budget(lambda: _close_all(env), recipe.options.close_seconds(), "the env")
        if factory is not None:
            _close_with_budget(factory.close, recipe.options.close_seconds(), "the env factory")


# -- the supervisor side ---------------------------------------------------------------------------


class _Worker:
    __slots__ = ("ctrl", "pid", "proc", "slot", "started_at", "state", "waiting")

    def __init__(self, proc: Any, ctrl: socket.socket, slot: int) -> None:
        self.slot = slot
        self.proc = proc
        self.ctrl = ctrl
        self.pid: int = proc.pid or 0
        self.state = "starting"  # starting -> ready -> serving -> gone
        self.waiting: tuple[_Peer, frames.Frame] | None = (
            None  # a client whose Hello waits for this worker
        )
        self.started_at = time.monotonic()


class SessionSupervisor:
    """The serving process's loop for ``sessions=N``: accept, answer probes, hand sessions to workers.

    Same control surface as :class:`ServeLoop` (``run``, ``stop``, ``stop_reason``,
    ``close_listener``, ``close_unstarted``), so :class:`ServerBase` drives it unchanged.
    """

    def __init__(
        self,
        listener: socket.socket,
        recipe: EnvRecipe,
        options: ServeOptions,
        sessions: int,
        prewarm: int,
    ) -> None:
        self.listener = listener
        self.recipe = recipe
        self.options = options
        self.sessions = sessions
        self.prewarm = prewarm
        self.stop_reason: str | None = None
        self.contract: dict[str, Any] | None = None
        self.on_request: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._waker = Waker()
        self._sel = Poller()
        self._listener_lock = threading.Lock()
        self._listener_closed = False
        self._strangers: dict[int, _Peer] = {}
        self._workers: list[_Worker] = []
        self._last_activity = time.monotonic()
        self._ctx: Any = None
        self._board: Any = (
            None  # per-slot time of each session's last request (see _watch_activity)
        )
        self._build_failures = 0  # in a row; prewarming pauses after each (doubling, capped)
        self._prewarm_after = 0.0  # time.monotonic() before which no worker is prewarmed
        self.crashes = 0  # workers that ended without a clean exit (for tests and logs)
        self.started = 0  # workers started so far

    # -- control (thread-safe) ------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()
        self._waker.wake()

    def close_listener(self) -> None:
        with self._listener_lock:
            if self._listener_closed:
                return
            self._listener_closed = True
        try:
            self.listener.close()
        except OSError:
            pass

    def close_unstarted(self) -> None:
        self._teardown()

    @property
    def in_use(self) -> int:
        return sum(1 for w in self._workers if w.state == "serving" or w.waiting is not None)

    def _free_slot(self) -> bool:
        return (
            any(w.state != "serving" and w.waiting is None for w in self._workers)
            or len(self._workers) < self.sessions
        )

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        sel = self._sel
        self.listener.setblocking(False)
        sel.register(self.listener, self.listener)
        wake = self._waker.reader
        sel.register(wake, wake)
        self._last_activity = time.monotonic()
        idle = self.options.idle_timeout_seconds
        stop = self._stop
        next_reap = time.monotonic() + 1.0
        try:
            self._replenish()
            while not stop.is_set():
                timeout = 1.0
                if idle is not None:
                    if self.in_use:
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
                    elif isinstance(obj, _Worker):
                        self._worker_event(obj)
                    else:
                        if obj.conn.backlog:
                            self._writable(obj)
                        self._readable(obj)
                    if stop.is_set():
                        break
                now = time.monotonic()
                if now >= next_reap:
                    next_reap = now + 1.0
                    if self.prewarm:
                        self._replenish()  # after a paused prewarm (an env that failed to build)
                    for peer in overdue(
                        list(self._strangers.values()),
                        _accepted_at,
                        now,
                        HANDSHAKE_DEADLINE_SECONDS,
                    ):
                        if not any(
                            w.waiting is not None and w.waiting[0] is peer for w in self._workers
                        ):
                            self._drop(peer)
        finally:
            self._teardown()

    # -- workers ----------------------------------------------------------------------------------

    def _context(self) -> Any:
        if self._ctx is None:
            method = _start_method()
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(_PRELOAD)
            self._ctx = ctx
        return self._ctx

    def _spawn(self) -> _Worker | None:
        ctx = self._context()
        if self._board is None:
            self._board = ctx.RawArray("d", self.sessions)
        used = {w.slot for w in self._workers}
        slot = next(i for i in range(self.sessions) if i not in used)
        self._board[slot] = 0.0
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = ctx.Process(
                target=_worker_main,
                args=(child, self.recipe, self._board, slot),
                name="rlmesh-session",
                daemon=False,
            )
            proc.start()
        except Exception as exc:
            parent.close()
            log.error("could not start a session worker: %s", exc)
            return None
        finally:
            child.close()
        parent.settimeout(_CTRL_SEND_SECONDS)
        self.started += 1
        worker = _Worker(proc, parent, slot)
        self._workers.append(worker)
        self._sel.register(parent, worker)
        _register_exit_guard(self)
        return worker

    def _replenish(self) -> None:
        """Keep ``prewarm`` workers ready (or starting, unclaimed), within the limit."""
        if self._stop.is_set() or time.monotonic() < self._prewarm_after:
            return
        spare = sum(
            1 for w in self._workers if w.state in ("starting", "ready") and w.waiting is None
        )
        while spare < self.prewarm and len(self._workers) < self.sessions:
            if self._spawn() is None:
                return
            spare += 1

    def _worker_event(self, worker: _Worker) -> None:
        try:
            msg, fds = _ctrl_recv(worker.ctrl)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self._worker_gone(worker)
            return
        what = msg[0]
        if what == "ready":
            self._build_failures = 0
            worker.state = "ready"
            if self.contract is None:
                self.contract = msg[2]
            if worker.waiting is not None:
                peer, frame = worker.waiting
                worker.waiting = None
                self._hand_over(worker, peer, frame)
        elif what == "failed":
            log.error("a session worker could not build the env: %s\n%s", msg[1], msg[2].rstrip())
            self._build_failures += 1  # don't rebuild a failing env in a tight loop
            self._prewarm_after = time.monotonic() + min(
                0.5 * 2 ** (self._build_failures - 1), 30.0
            )
            if worker.waiting is not None:
                peer, _frame = worker.waiting
                worker.waiting = None
                self._send(
                    peer,
                    m.Error(
                        code=CODE_NUMBERS["INTERNAL"],
                        message=f"the env could not be built: {msg[1]}",
                        recoverable=False,
                    ),
                )
                self._drop(peer)
            worker.state = "failed"
        elif what == "shutdown":
            reason = str(msg[1])
            self.stop(f"remote shutdown: {reason}" if reason else "remote shutdown")

    def _worker_gone(self, worker: _Worker) -> None:
        self._sel.unregister(worker.ctrl)
        try:
            worker.ctrl.close()
        except OSError:
            pass
        worker.proc.join(1.0)
        code = worker.proc.exitcode
        was = worker.state
        worker.state = "gone"
        if worker in self._workers:
            self._workers.remove(worker)
        if code not in (0, None) or (was == "serving" and code is None):
            self.crashes += 1
            how = (
                f"was killed by signal {-code}"
                if isinstance(code, int) and code < 0
                else f"exited with status {code}"
            )
            log.warning(
                "session worker %d %s; its session ended (the endpoint keeps serving the others)",
                worker.pid,
                how,
            )
        if worker.waiting is not None:
            peer, _frame = worker.waiting
            worker.waiting = None
            self._send(
                peer,
                m.Error(
                    code=CODE_NUMBERS["INTERNAL"],
                    message="the session worker died while starting",
                    recoverable=False,
                ),
            )
            self._drop(peer)
        self._touch()
        self._replenish()

    def _hand_over(self, worker: _Worker, peer: _Peer, frame: frames.Frame) -> None:
        sock = peer.conn.sock
        if peer.conn.closed:
            self._replenish()
            return
        try:
            _ctrl_send(
                worker.ctrl,
                ("session", frame.kind, frame.request_id, bytes(frame.header)),
                [sock.fileno()],
            )
        except OSError as exc:
            log.warning("handing a session to worker %d failed (%s)", worker.pid, exc)
            self._send(
                peer,
                m.Error(
                    code=CODE_NUMBERS["INTERNAL"],
                    message="the session could not be started",
                    recoverable=False,
                ),
            )
            self._drop(peer)
            return
        worker.state = "serving"
        # the worker owns the connection now: forget this process's copy without touching the stream
        self._sel.unregister(sock)
        self._strangers.pop(sock.fileno(), None)
        peer.conn.closed = True
        try:
            sock.close()
        except OSError:
            pass
        self._touch()
        self._replenish()

    # -- connections before their session ---------------------------------------------------------

    def _accept(self) -> None:
        for sock in accept_ready(self.listener):
            peer = _Peer(
                Connection(sock, frames.PRE_HANDSHAKE_LIMITS),
                frames.PRE_HANDSHAKE_LIMITS.max_frame_bytes,
            )
            self._strangers[sock.fileno()] = peer
            self._sel.register(sock, peer)
            if len(self._strangers) > MAX_PENDING:
                waiting = {id(w.waiting[0]) for w in self._workers if w.waiting is not None}
                idle = [p for p in self._strangers.values() if id(p) not in waiting]
                if idle:
                    self._drop(min(idle, key=_accepted_at))

    def _writable(self, peer: _Peer) -> None:
        try:
            done = peer.conn.flush()
        except ConnectionLost:
            self._drop(peer)
            return
        if done:
            self._sel.want_write(peer.conn.sock, False)

    def _readable(self, peer: _Peer) -> None:
        conn = peer.conn
        for _ in range(16):
            if conn.closed:
                return
            try:
                frame = conn.recv_frame()
            except ConnectionLost:
                self._drop(peer)
                return
            except ProtocolException as exc:
                self._protocol_error(peer, exc)
                return
            except Exception as exc:
                log.warning("reading from a client failed (%s); closing its connection", exc)
                self._drop(peer)
                return
            if frame is None:
                return
            if any(w.waiting is not None and w.waiting[0] is peer for w in self._workers):
                self._protocol_error(
                    peer, ProtocolException("a request arrived before the handshake was answered")
                )
                return
            try:
                msg = peer.session.receive(frame)
            except ProtocolException as exc:
                self._protocol_error(peer, exc)
                return
            if type(msg) is m.Ping:
                self._send(
                    peer,
                    m.SessionsPong(
                        state="ready" if self._free_slot() else "busy",
                        generation=PROTOCOL_GENERATION,
                        service="env",
                        sessions=self.in_use,
                        limit=self.sessions,
                    ),
                )
            elif type(msg) is m.Shutdown:
                self._shutdown_request(peer, msg)
            elif type(msg) is m.Hello:
                self._admit(peer, frame, conn)
                return
            else:  # pragma: no cover - the state table admits nothing else before a handshake
                self._protocol_error(peer, ProtocolException("request outside a session"))
                return

    def _admit(self, peer: _Peer, frame: frames.Frame, conn: Connection) -> None:
        if conn.buffered or conn.backlog:
            self._protocol_error(
                peer, ProtocolException("a request arrived before the handshake was answered")
            )
            return
        ready = [w for w in self._workers if w.state == "ready" and w.waiting is None]
        if ready:
            self._hand_over(ready[0], peer, frame)
            return
        starting = [w for w in self._workers if w.state == "starting" and w.waiting is None]
        worker = (
            starting[0]
            if starting
            else (self._spawn() if len(self._workers) < self.sessions else None)
        )
        if worker is not None:
            worker.waiting = (peer, frame)
            self._replenish()
            return
        self._send(
            peer,
            m.Busy(
                message=f"all {self.sessions} sessions of this endpoint are in use (sessions={self.sessions}); "
                "close another client, serve more sessions (--sessions), or connect with wait_for_slot=True "
                "to wait for a free one"
            ),
        )
        self._drop(peer)

    def _shutdown_request(self, peer: _Peer, msg: m.Shutdown) -> None:
        if not self.options.remote_shutdown_allowed():
            self._send(
                peer,
                m.ShutdownReply(
                    accepted=False,
                    message="remote shutdown is disabled for this environment endpoint",
                ),
            )
            return
        reason = (msg.reason or "").strip()
        self._send(
            peer,
            m.ShutdownReply(
                accepted=True,
                message=f"shutdown accepted: {reason}" if reason else "shutdown accepted",
            ),
        )
        self.stop(f"remote shutdown: {reason}" if reason else "remote shutdown")

    def _send(self, peer: _Peer, msg: Any) -> None:
        conn = peer.conn
        if conn.closed:
            return
        try:
            buffers = peer.session.send(msg)
        except ProtocolException:
            return
        try:
            queued = conn.backlog
            if not conn.post(buffers, STRANGER_BACKLOG_BYTES):
                self._drop(peer)
                return
        except ConnectionLost:
            self._drop(peer)
            return
        if conn.backlog and not queued:
            self._sel.want_write(conn.sock, True)

    def _protocol_error(self, peer: _Peer, exc: ProtocolException) -> None:
        log.info("protocol error from a client, closing its connection: %s", exc)
        self._send(
            peer, m.Error(code=CODE_NUMBERS["PROTOCOL"], message=str(exc), recoverable=False)
        )
        self._drop(peer)

    def _drop(self, peer: _Peer) -> None:
        for w in self._workers:
            if w.waiting is not None and w.waiting[0] is peer:
                w.waiting = None
        conn = peer.conn
        if not conn.closed:
            self._sel.unregister(conn.sock)
            self._strangers.pop(conn.sock.fileno(), None)
            conn.close()

    def _touch(self) -> None:
        self._last_activity = time.monotonic()
        if self.on_request is not None:
            self.on_request()

    # -- the end ----------------------------------------------------------------------------------

    def _teardown(self) -> None:
        for peer in list(self._strangers.values()):
            self._drop(peer)
        self.close_listener()  # new clients are refused at once while the sessions drain
        self.stop_workers(self.stop_reason or "stopped")
        for obj in (self.listener, self._waker.reader):
            try:
                self._sel.unregister(obj)
            except (OSError, ValueError):
                pass
        self._sel.close()
        self._waker.close()

    def stop_workers(self, reason: str) -> None:
        """Ask every worker to stop (each drains and closes its env); kill what outlives the budget."""
        workers = list(self._workers)
        self._workers.clear()
        for w in workers:
            try:
                _ctrl_send(w.ctrl, ("stop", reason))
            except OSError:
                pass
        # a little inside shutdown()'s own wait (drain + close), so it sees the workers gone
        budget = time.monotonic() + max(
            1.0, self.options.drain_seconds() + self.options.close_seconds() - 1.0
        )
        for w in workers:
            w.proc.join(max(0.0, budget - time.monotonic()))
        for w in workers:
            if w.proc.is_alive():
                log.warning("session worker %d did not stop in time; killing it", w.pid)
                w.proc.kill()
                w.proc.join(5.0)
            try:
                self._sel.unregister(w.ctrl)
            except (OSError, ValueError):
                pass
            try:
                w.ctrl.close()
            except OSError:
                pass


_GUARDED: list[Any] = []


def _register_exit_guard(supervisor: SessionSupervisor) -> None:
    """At interpreter exit, stop the workers before ``multiprocessing`` joins its children."""
    import weakref
    from multiprocessing import util

    if any(ref() is supervisor for ref in _GUARDED):
        return
    ref = weakref.ref(supervisor)
    _GUARDED.append(ref)

    def guard() -> None:
        sup = ref()
        if sup is not None and sup._workers:
            sup.stop_workers("interpreter exit")

    util.Finalize(None, guard, exitpriority=100)


class SessionsEnvServer(EnvServer):
    """What ``EnvServer(target, sessions=N)`` is for ``N > 1``: a supervisor and a worker per session.

    Built through :class:`EnvServer` (same arguments); ``env`` is what each session's
    env is built from (see the module docstring).
    """

    def __init__(
        self,
        env: Any,
        address: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
        options: ServeOptions | None = None,
        tags: Any = None,
        framework: Any = None,
        device: Any = None,
        close_env_on_shutdown: bool = True,
        sessions: int = 1,
        prewarm: int = 0,
        recipe: EnvRecipe | None = None,
    ) -> None:
        self._kind = "EnvServer"
        if options is not None and not isinstance(options, ServeOptions):
            raise TypeError(f"options must be a ServeOptions, got {type(options).__name__}")
        check_sessions(sessions, prewarm)
        if recipe is None:
            recipe = EnvRecipe(
                source=env,
                tags=tags,
                framework=framework,
                device=device,
                options=options or ServeOptions(),
                close_env=close_env_on_shutdown,
            )
        if recipe.builder is None:
            _check_target(recipe.source, sessions)
        recipe.options = _declared_once(recipe.options)
        self._options = recipe.options
        addr = resolve_address(
            address, host=host, port=port, path=path, transport=transport, bind=True
        )
        try:
            listener, bound = listen(addr)
        except OSError as exc:
            what = (
                f"unix socket '{addr.path}'"
                if addr.transport == "unix"
                else f"tcp listener on {addr.url}"
            )
            raise BindFailed(f"failed to bind {what}: {exc}") from exc
        self._address = bound.url
        self._supervisor = SessionSupervisor(listener, recipe, recipe.options, sessions, prewarm)
        self._init_lifecycle(self._supervisor, lambda: None, False, bound.path or None)

    @property
    def sessions(self) -> int:
        """The most sessions served at once."""
        return self._supervisor.sessions

    @property
    def sessions_in_use(self) -> int:
        """Sessions being served now (clients past their handshake, or waiting for their env)."""
        return self._supervisor.in_use

    @property
    def env_contract(self) -> EnvContract:
        """The contract the session workers publish (known once the first worker built its env).

        Raises:
            RuntimeError: no worker has built an env yet (use ``prewarm=`` or connect first).
        """
        if self._supervisor.contract is None:
            raise RuntimeError(
                "the contract of a multi-session endpoint is known once a session worker has built its env; "
                "connect a client first, or serve with prewarm >= 1"
            )
        return EnvContract.from_dict(self._supervisor.contract)

    @property
    def spec(self) -> EnvContract:
        return self.env_contract


def _declared_once(options: ServeOptions) -> ServeOptions:
    """Resolve the declared edition here (one warning, if any), so no worker warns again."""
    declared = resolve_declared_edition(
        served=options.workflow_edition, warn=True, who="this EnvServer"
    )
    if declared == options.workflow_edition or not declared:
        return options
    return ServeOptions(
        allow_remote_shutdown=options.allow_remote_shutdown,
        idle_timeout_seconds=options.idle_timeout_seconds,
        drain_timeout_seconds=options.drain_timeout_seconds,
        close_timeout_seconds=options.close_timeout_seconds,
        workflow_edition=declared,
    )


def serve_sessions(
    recipe: EnvRecipe,
    address: str,
    *,
    sessions: int,
    prewarm: int,
    announce: Callable[[str], None],
) -> str | None:
    """Serve ``recipe`` with up to ``sessions`` sessions on ``address`` (blocking); returns the stop reason."""
    server = SessionsEnvServer(None, address, sessions=sessions, prewarm=prewarm, recipe=recipe)
    announce(server.address)
    server.serve()
    return server.stop_reason
