"""The openpi wire's serve loop: an rlmesh model answering openpi clients.

``rlmesh.serve.ModelServer(model, address, protocol="openpi")`` hosts this loop instead of
rlmesh's own: it binds, serves, stops and closes the model through the same lifecycle
(``start``/``serve``/``shutdown``, signals, ``with``). What a client sees is openpi's
policy server:

- on connect, the server's metadata (one binary msgpack message);
- then per message: an observation dict in, ``{"actions": [H, ...], "server_timing":
  {"infer_ms": ..., "prev_total_ms": ...}}`` out, where ``H`` is the chunk the model
  returns at the server's execution horizon (1 for a model without a chunk corner);
- a failure of the model: its traceback as a text message, then close code 1011
  (what ``openpi-client`` reports as "Error in inference server"); a malformed message:
  the reason as text, then close code 1003/1007. Other clients are not disturbed.
- ``GET /healthz`` answers ``200 OK`` without a WebSocket (a readiness probe).

Each connection is one episode of the model's: its own route (episode context,
``predict_seed`` state), begun at connect and ended at disconnect (``on_episode_end``
fires). Connections are served each on their own thread, at most ``sessions`` at once
(one more is refused at the upgrade with HTTP 503, "busy"); the model runs one forward
at a time, so a model need not be thread-safe.

With a token (``ServeOptions(token=...)``, ``RLMESH_TOKEN``), :meth:`OpenPILoop._admit`
checks the upgrade request's ``Authorization: Bearer <token>`` header before anything else
of the session happens: a missing or wrong one gets HTTP 401 (``AuthenticationFailed`` for
``PolicyClient``), counted, logged with the peer and, when a host keeps guessing, answered
later and later (on that connection's own thread). ``/healthz`` needs no token.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import traceback
from typing import Any

import numpy as np

from .._meter import Meter, observe_predict
from .._token import Gate, refusal_text
from ..errors import ProtocolException
from ..models._route import LocalRoute
from . import _deps
from ._codec import Packer, packb, unpackb
from ._connection import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["OpenPILoop"]

log = logging.getLogger("rlmesh.openpi")

_CLOSE_UNSUPPORTED = 1003  # a text message where a binary one belongs
_CLOSE_INVALID = 1007  # not an openpi message
_CLOSE_INTERNAL = 1011  # the model failed (openpi's server closes with this code too)
_ids = itertools.count(1)


class _NoContract:
    """The env side a route binds to here: an openpi client publishes no contract."""

    observation_space = None
    action_space = None
    metadata = None
    num_envs = 1


class _Unbound:
    """What ``LocalRoute.bind`` reads: no spaces, the observation as the client sent it."""

    contract = _NoContract()
    single_action_space = None
    action_space = None
    canonical = False


class OpenPILoop:
    """Serve ``model`` on ``host:port`` to openpi clients (the lifecycle's loop interface).

    Args:
        model: An rlmesh model instance.
        host, port: Where to listen (port 0: an ephemeral port, see :attr:`port`).
        metadata: What every client receives on connect.
        sessions: Most connections served at once.
        execution_horizon: The chunk length asked of a chunk model.
        idle_timeout_seconds: Stop after this long with no connection (``None``: never).
        max_message_bytes: Largest observation accepted.
        token: The ``Authorization: Bearer`` token every client must send (``None``: none).
        ssl_context: Serve TLS (``wss://``) with this server context.
        metrics: Count what a scrape reports (:meth:`metrics_values`): forwards, batch
            sizes, message bytes, busy refusals, refused tokens.

    Raises:
        OSError: the address cannot be bound.
        ValueError: the model cannot be served at this horizon (checked by binding once).
    """

    def __init__(
        self,
        model: Any,
        host: str,
        port: int,
        *,
        metadata: dict[str, Any],
        sessions: int = 1,
        execution_horizon: int = 1,
        idle_timeout_seconds: float | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: str | None = None,
        ssl_context: Any = None,
        metrics: bool = False,
    ) -> None:
        self.model = model
        self.gate = Gate(token)  # the token check, and its throttle
        self.meter = Meter("model") if metrics else None
        self.sessions = sessions
        self.execution_horizon = execution_horizon
        self.idle_timeout_seconds = idle_timeout_seconds
        self.stop_reason: str | None = None
        self._metadata = packb(metadata)
        self._route().close()  # a model that cannot be served fails here, before the bind
        self._forward = threading.Lock()  # one model forward at a time
        self._lock = threading.Lock()
        self._admitted: set[Any] = set()
        self._last_active = time.monotonic()
        self._stopping = threading.Event()
        self._running = False
        serve = _deps.websockets_server().serve
        self._server = serve(
            self._handle,
            host,
            port,
            compression=None,  # arrays do not deflate; openpi's client asks for none either
            max_size=max_message_bytes,
            process_request=self._admit,
            server_header="rlmesh-py",
            ssl=ssl_context,
        )
        bound = self._server.socket.getsockname()
        self.host, self.port = str(bound[0]), int(bound[1])

    # -- the lifecycle's loop interface ----------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop`; then close every connection and wait for their handlers."""
        with self._lock:
            if self._stopping.is_set():  # stopped before it ran
                self.close_listener()
                return
            self._running = True
        watchdog = None
        if self.idle_timeout_seconds is not None:
            watchdog = threading.Thread(
                target=self._watch_idle, name="rlmesh-openpi-idle", daemon=True
            )
            watchdog.start()
        try:
            self._server.serve_forever()
        finally:
            self._stopping.set()
            self._server.shutdown()  # closes open connections (1001) and joins their threads

    def stop(self, reason: str) -> None:
        """Ask the loop to stop (never blocks: a signal handler on the serving thread calls it)."""
        with self._lock:
            if self.stop_reason is not None:
                return
            self.stop_reason = reason
            self._stopping.set()
            running = self._running
        if running:  # websockets' shutdown waits for serve_forever: not for a loop that never ran
            threading.Thread(
                target=self._server.shutdown, name="rlmesh-openpi-stop", daemon=True
            ).start()

    def close_listener(self) -> None:
        """Stop accepting: close the listening socket (a forward may still be running)."""
        try:
            self._server.socket.close()
        except OSError:
            pass

    def close_unstarted(self) -> None:
        """Release the bound socket of a loop that never ran."""
        self.close_listener()

    def _watch_idle(self) -> None:
        idle = self.idle_timeout_seconds
        assert idle is not None
        while not self._stopping.wait(min(idle / 4, 0.25)):
            with self._lock:
                busy = bool(self._live())
            if busy:
                self._last_active = time.monotonic()
            elif time.monotonic() - self._last_active >= idle:
                self.stop("idle timeout")
                return

    # -- admission (the HTTP upgrade) -------------------------------------------------------

    def _live(self) -> set[Any]:
        """Admitted connections still open (one the handshake lost never reaches a handler)."""
        self._admitted = {c for c in self._admitted if getattr(c.state, "name", "") != "CLOSED"}
        return self._admitted

    def _admit(self, connection: Any, request: Any) -> Any:
        """Before the upgrade: health probe, the token check, the session limit.

        Returns ``None`` to accept, or the HTTP response that refuses.
        """
        if request.path == "/healthz":
            return connection.respond(200, "OK\n")
        if self.gate.token is not None:
            refusal = self._check_token(connection, request)
            if refusal is not None:
                return refusal
        with self._lock:
            if self._stopping.is_set():
                return connection.respond(503, "shutting down\n")
            if len(self._live()) >= self.sessions:
                if self.meter is not None:
                    self.meter.rejected += 1
                return connection.respond(
                    503,
                    f"busy: this endpoint serves {self.sessions} client(s) at once; "
                    "serve it with more sessions (--sessions N)\n",
                )
            self._admitted.add(connection)
            self._last_active = time.monotonic()
        return None

    def _check_token(self, connection: Any, request: Any) -> Any:
        """``None`` when the request carries the token, else the HTTP 401 that refuses it
        (after the throttle's wait: this connection's own thread)."""
        header = str(request.headers.get("Authorization", "") or "")
        scheme, _, given = header.partition(" ")
        given = given.strip() if scheme.lower() == "bearer" else ""
        if self.gate.admits(given):
            return None
        peer = connection.remote_address
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        with self._lock:
            delay, count = self.gate.refused(host)
        log.warning(
            "authentication failed: %s sent %s; refused with HTTP 401 (the endpoint keeps serving)%s",
            f"{host}:{peer[1]}" if isinstance(peer, tuple) and len(peer) > 1 else host,
            "no token" if not given else "a wrong token",
            f"; {count} failures from {host} so far" if delay else "",
        )
        if delay and self._stopping.wait(min(delay, 30.0)):
            return connection.respond(503, "shutting down\n")
        text = refusal_text(
            given,
            what="openpi endpoint",
            throttled=bool(delay),
            how="send the endpoint's token as an 'Authorization: Bearer <token>' header "
            "(rlmesh.openpi.PolicyClient(url, token=...), or RLMESH_TOKEN)",
        )
        response = connection.respond(401, text + "\n")
        response.headers["WWW-Authenticate"] = 'Bearer realm="rlmesh"'
        return response

    def metrics_values(self) -> dict[str, Any]:
        """What a scrape reports (``rlmesh.serve._metrics``): the counts, sessions, refusals."""
        values: dict[str, Any] = self.meter.snapshot() if self.meter is not None else {}
        with self._lock:
            values["sessions_active"] = len(self._live())
        values["auth_failures"] = self.gate.failures
        return values

    # -- one connection -------------------------------------------------------------------

    def _route(self) -> LocalRoute:
        route = LocalRoute(
            self.model,
            instruction=None,
            trust_entrypoints=None,
            execution_horizon=self.execution_horizon,
            adapt=False,  # the client sends the model's own payload
        )
        route.bind(_Unbound())
        return route

    def _handle(self, ws: Any) -> None:
        episode = f"openpi-{next(_ids)}"
        try:
            route = self._route()
            route.begin_episode(episode, None)
        except Exception:
            _fail(ws, traceback.format_exc())
            self._release(ws)
            return
        try:
            ws.send(self._metadata)
            self._serve(ws, route)
        except _deps.websockets_exceptions().ConnectionClosed:
            pass  # the client went away: its episode ends below
        finally:
            try:
                route.end_episode(episode)
            except Exception:
                log.exception("on_episode_end failed when an openpi client disconnected")
            route.close()
            self._release(ws)

    def _serve(self, ws: Any, route: LocalRoute) -> None:
        packer = Packer()
        prev_total_ms: float | None = None
        while True:
            raw = ws.recv()
            start = time.perf_counter()
            if isinstance(raw, str):
                _refuse(ws, _CLOSE_UNSUPPORTED, "expected a binary msgpack observation, got text")
                return
            try:
                obs = unpackb(raw)
            except ProtocolException as exc:
                _refuse(ws, _CLOSE_INVALID, str(exc))
                return
            if not isinstance(obs, dict):
                _refuse(ws, _CLOSE_INVALID, f"an observation is a dict, got {type(obs).__name__}")
                return
            try:
                with self._forward:
                    t0 = time.perf_counter()
                    frames = route.predict_frames(obs)
                    infer_ms = (time.perf_counter() - t0) * 1000.0
                actions = _stack(frames)
            except Exception:
                _fail(ws, traceback.format_exc())
                return
            timing: dict[str, float] = {"infer_ms": infer_ms}
            if prev_total_ms is not None:
                timing["prev_total_ms"] = prev_total_ms
            reply = packer.pack({"actions": actions, "server_timing": timing})
            meter = self.meter
            if meter is not None:  # one forward of one observation; the messages' bytes
                observe_predict(meter, int(infer_ms * 1e6), 1)
                meter.rx += len(raw)
                meter.tx += len(reply)
            ws.send(reply)
            prev_total_ms = (time.perf_counter() - start) * 1000.0

    def _release(self, ws: Any) -> None:
        with self._lock:
            self._admitted.discard(ws)
            self._last_active = time.monotonic()


def _stack(frames: list[Any]) -> Any:
    """A chunk's frames as one ``[H, ...]`` array (what an openpi client indexes per step)."""
    arrays = [np.asarray(f) for f in frames]
    if any(a.dtype.kind not in "biuf" for a in arrays):
        raise TypeError(
            "an openpi reply carries one numeric actions array; this model's actions are "
            f"{[f'{a.dtype}{list(a.shape)}' for a in arrays[:1]]} (a Dict or text action cannot travel)"
        )
    return np.stack(arrays)


def _refuse(ws: Any, code: int, why: str) -> None:
    """A client broke the protocol: tell it in text, close its connection only."""
    log.info("openpi client refused: %s", why)
    try:
        ws.send(f"rlmesh openpi server: {why}")
        ws.close(code, why[:120])
    except Exception:
        pass


def _fail(ws: Any, text: str) -> None:
    """The model failed: its traceback as text, then 1011 (as openpi's own server does)."""
    log.error("the served model failed on an openpi request:\n%s", text)
    try:
        ws.send(text)
        ws.close(_CLOSE_INTERNAL, "Internal server error. Traceback included in previous frame.")
    except Exception:
        pass
