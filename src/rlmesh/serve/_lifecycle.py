"""Server lifecycle shared by ``EnvServer`` and ``ModelServer`` (SRV-40..46, DELTA-16..18).

A server binds in its constructor, then serves on the calling thread (``serve``)
or a background thread (``start``) until ``shutdown``, a signal, a remote
shutdown, the idle timeout or garbage collection; the served object is closed
exactly once on the way out.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..errors import BindFailed
from ..transport import Address, listen, resolve_address
from ._auth import check_exposure
from ._metrics import MetricsServer
from ._options import ServeOptions
from ._terminate import TermWatch

__all__ = ["Lifecycle", "Loop", "ServerBase"]

log = logging.getLogger("rlmesh.serve")

_FINALIZER_JOIN_SECONDS = 15.0  # DELTA-18
_S = TypeVar("_S", bound="ServerBase")


class Loop(Protocol):
    """What a server's lifecycle drives: rlmesh's ``ServeLoop`` or another wire's loop (openpi)."""

    stop_reason: str | None

    def run(self) -> None: ...

    def stop(self, reason: str) -> None: ...

    def close_listener(self) -> None: ...

    def close_unstarted(self) -> None: ...


class Lifecycle:
    """Server state shared with the GC finalizer (which must not reference the server)."""

    def __init__(
        self, loop: Loop, closer: Callable[[], None], close_env: bool, unix_path: str | None
    ) -> None:
        self.loop = loop
        self.closer = closer
        self.close_env = close_env
        self.unix_path = unix_path
        self.socket_identity = socket_identity(unix_path)  # the file this server created
        self.lock = threading.Lock()
        self.state = "created"  # created -> serving -> stopped
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.foreground = False
        self.env_closed = False
        self.socket_removed = False
        self.errors: list[str] = []
        self.metrics: MetricsServer | None = None  # the Prometheus port, with metrics on

    def close_metrics(self) -> None:
        """Stop serving metrics (idempotent)."""
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            try:
                metrics.close()
            except Exception as exc:  # pragma: no cover - shutting down anyway
                log.warning("stopping the metrics port failed: %s", exc)

    def close_env_once(self) -> None:
        with self.lock:
            if self.env_closed or not self.close_env:
                self.env_closed = True
                return
            self.env_closed = True
        try:
            self.closer()  # SRV-43: exactly once
        except Exception as exc:
            self.errors.append(f"close failed: {type(exc).__name__}: {exc}")
            log.warning("closing the served object failed: %s", exc)

    def cleanup_socket(self) -> None:
        """Remove the unix socket file, once, and only the file this server created.

        A later server may own the path by then (the file was removed under us and the path
        bound again): that socket is a different inode, and it is left alone (issue 28).
        """
        with self.lock:
            if self.socket_removed or not self.unix_path:
                return
            self.socket_removed = True
        remove_own_socket(self.unix_path, self.socket_identity)  # SRV-45

    def run(self) -> None:
        try:
            self.loop.run()
        except BaseException as exc:
            self.errors.append(f"serve loop failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            self.close_metrics()
            self.cleanup_socket()
            self.close_env_once()
            self.state = "stopped"
            self.done.set()


def socket_identity(path: str | None) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the unix socket file at ``path`` (``None``: no path or no file)."""
    if not path:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def remove_own_socket(path: str, identity: tuple[int, int] | None) -> bool:
    """Unlink ``path`` only while it is still the socket file ``identity`` names.

    Returns whether the file was removed. Another live server's socket at the same path
    (same name, different device or inode) is never touched.
    """
    if identity is None or socket_identity(path) != identity:
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def finalize(life: Lifecycle) -> None:
    """DELTA-18: a server dropped or alive at exit is stopped and its env closed."""
    if life.state == "created":
        life.state = "stopped"
        life.loop.stop("garbage collected")
        life.loop.close_unstarted()
        life.close_metrics()
        life.cleanup_socket()
        life.close_env_once()
        return
    life.loop.stop("garbage collected")
    thread = life.thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(_FINALIZER_JOIN_SECONDS)


def _check_trust(addr: Address, options: ServeOptions, who: str) -> Address:
    if addr.tls and not options.tls:
        raise ValueError(
            f"{addr.url} serves TLS and needs a certificate: pass --tls-cert PATH --tls-key PATH "
            "(ServeOptions(tls_cert=..., tls_key=...))"
        )
    if options.tls:
        if addr.transport == "unix":
            raise ValueError(
                "TLS (--tls-cert/--tls-key) is for TCP addresses (tls://host:port); a unix socket "
                "never leaves this host: serve it without TLS"
            )
        addr = Address("tcp", host=addr.host, port=addr.port, tls=True)
    check_exposure(addr, options, who=who)
    return addr


class ServerBase:
    """Lifecycle methods; subclasses set ``_kind``, ``_address``, ``_options`` and call ``_init_lifecycle``."""

    _kind = "server"
    _address: str
    _options: ServeOptions
    _life: Lifecycle

    def _bind(
        self,
        address: str | None,
        host: str | None,
        port: int | None,
        path: str | None,
        transport: str | None,
    ) -> tuple[Any, str | None]:
        """Bind this server's listener (ADR-3 helpers instead of ``address``) and note its
        address: ``(socket, unix socket path or None)``.

        First the trust checks (docs/security.md): an address other hosts can reach needs a
        token (or the explicit opt-out), and TLS needs a certificate and a TCP address;
        certificates make a ``host:port`` address a ``tls://`` one.

        Raises:
            BindFailed: the address cannot be bound (in use, no such directory ...).
            InsecureEndpoint: beyond loopback without a token (nothing was bound).
            ValueError: TLS asked for without a certificate, or on a unix socket.
        """
        addr = resolve_address(
            address, host=host, port=port, path=path, transport=transport, bind=True
        )
        addr = _check_trust(addr, self._options, self._kind)
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
        return listener, bound.path or None

    def _init_lifecycle(
        self,
        loop: Loop,
        closer: Callable[[], None],
        close_on_shutdown: bool,
        unix_path: str | None,
    ) -> None:
        self._life = Lifecycle(loop, closer, close_on_shutdown, unix_path)
        self._finalizer = weakref.finalize(self, finalize, self._life)
        metrics_address = self._options.metrics_address
        values = getattr(loop, "metrics_values", None)
        if metrics_address is not None and values is not None:
            try:
                service = getattr(getattr(loop, "service", None), "service", "model")
                self._life.metrics = MetricsServer(metrics_address, values, service)
            except BaseException:
                self.shutdown()  # nothing half-started stays behind (the listener is bound)
                raise

    @property
    def metrics_address(self) -> str | None:
        """Where Prometheus scrapes this endpoint (``http://127.0.0.1:9100/metrics``), or ``None``."""
        metrics = self._life.metrics
        return None if metrics is None else metrics.address

    @property
    def address(self) -> str:
        """The resolved address: ``tcp://127.0.0.1:54321`` or ``unix:///abs/path`` (SRV-7)."""
        return self._address

    @property
    def options(self) -> ServeOptions:
        return self._options

    @property
    def token(self) -> str | None:
        """The token clients must send (``None``: none); what ``rlmesh.run(model, server)``
        and ``workers=`` runs dial this server with."""
        return self._options.token

    @property
    def stop_reason(self) -> str | None:
        """Why serving stopped (``"shutdown"``, ``"idle timeout"``, ``"remote shutdown"`` ...)."""
        return self._life.loop.stop_reason

    def __repr__(self) -> str:
        return f"{self._kind}(address='{self._address}')"

    # -- lifecycle --------------------------------------------------------------------------

    def _begin(self, foreground: bool) -> None:
        life = self._life
        with life.lock:
            if life.state == "serving":
                raise RuntimeError(f"{self._kind} is already serving; call shutdown() first")
            if life.state == "stopped":
                raise RuntimeError(
                    f"{self._kind} was shut down and cannot serve again; build a new {self._kind}"
                )
            life.state = "serving"
            life.foreground = foreground

    def serve(self) -> None:
        """Serve on the calling thread until shutdown (SRV-40, DELTA-16/17).

        On the main thread the first Ctrl-C (SIGINT) or a SIGTERM (what Docker, systemd
        and Kubernetes send) shuts down gracefully: drain, ``env.close()``, remove the
        unix socket file, and ``serve()`` returns (:attr:`stop_reason` is
        ``"interrupted"`` or ``"terminated"``). A second Ctrl-C interrupts the running
        env call. SIGTERM always ends the process: when serving has not stopped within
        the drain + close budget (an env call that never returns), or at a second
        SIGTERM, the listener is closed, the unix socket file removed and the process
        exits with status 143 without closing the env.
        """
        self._begin(foreground=True)
        life = self._life
        previous: dict[int, Any] = {}
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:

            def on_sigint(signum: int, frame: Any) -> None:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                life.loop.stop("interrupted")

            watch = self._term_watch()

            def on_sigterm(signum: int, frame: Any) -> None:
                watch.on_sigterm()  # stop now; exit once the budget is spent (issue 28)

            previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_sigint)
            if hasattr(signal, "SIGTERM"):
                previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            life.run()
        finally:
            if on_main:
                watch.disarm()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._finalizer.detach()

    def _term_watch(self) -> TermWatch:
        """Issue 28: SIGTERM ends the process within the drain + close budget, stuck env or not."""
        life = self._life

        def abandon() -> None:
            life.loop.close_listener()
            life.cleanup_socket()

        return TermWatch(
            lambda: life.loop.stop("terminated"),
            life.done,
            self._options.drain_seconds() + self._options.close_seconds(),
            abandon,
            f"{self._kind} at {self._address}",
        )

    def start(self: _S) -> _S:
        """Serve on a background thread (no signal handlers); returns ``self``."""
        self._begin(foreground=False)
        life = self._life
        thread = threading.Thread(
            target=life.run, name=f"rlmesh-serve {self._address}", daemon=True
        )
        life.thread = thread
        thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the background server stopped; ``False`` if ``timeout`` passes first (SRV-41)."""
        if timeout is not None and (timeout != timeout or timeout < 0 or timeout == float("inf")):
            raise ValueError(
                f"timeout must be a non-negative finite number or None, got {timeout!r}"
            )
        life = self._life
        if life.state == "created":
            raise RuntimeError(
                f"{self._kind}.wait() called before start(): it needs a started server; call start() first"
            )
        if life.state == "serving" and life.foreground:
            raise RuntimeError(
                f"{self._kind}.wait() is for start(); serve() is running in the foreground"
            )
        return life.done.wait(timeout)

    def shutdown(self) -> None:
        """Stop serving, drain, and close the env (once). Idempotent and thread-safe (SRV-42)."""
        life = self._life
        with life.lock:
            state = life.state
            if state == "created":
                life.state = "stopped"
        if state == "created":
            life.loop.stop("shutdown")
            life.loop.close_unstarted()
            life.close_metrics()
            life.cleanup_socket()
            life.close_env_once()
            life.done.set()
            self._finalizer.detach()
            return
        life.loop.stop("shutdown")
        if life.thread is not threading.current_thread():
            budget = self._options.drain_seconds() + self._options.close_seconds()
            if not life.done.wait(budget):
                # The env call is stuck: stop accepting now, so the endpoint refuses new
                # clients (and the unix socket file is gone) even while it stays stuck.
                life.loop.close_listener()
                life.cleanup_socket()
                log.warning(
                    "%s at %s did not stop within %.1fs (a call is still running); the listener "
                    "is closed and the env will close when that call returns",
                    self._kind,
                    self._address,
                    budget,
                )
        self._finalizer.detach()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
