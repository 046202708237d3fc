"""One WebSocket connection to an openpi policy server, its failures mapped to rlmesh's errors.

The openpi wire, as a client sees it: connect (HTTP upgrade), receive the server's
metadata (one binary message), then strictly alternate one observation (binary) and one
reply (binary). A server that fails sends its error as a *text* message and closes with
1011. Everything the ``websockets`` library raises is mapped here, once
(``ConnectFailed``, ``EndpointBusy``, ``ConnectionLost``, ``RequestTimeout``,
``ModelError``), so nothing above catches ``OSError`` or a ``websockets`` exception.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import Any

from ..errors import (
    AuthenticationFailed,
    ConnectFailed,
    ConnectionLost,
    EndpointBusy,
    ModelError,
    ProtocolException,
    RequestTimeout,
)
from . import _deps
from ._codec import Packer, unpackb

__all__ = ["DEFAULT_CONNECT_TIMEOUT_SECONDS", "DEFAULT_MAX_MESSAGE_BYTES", "Connection"]

DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0
#: Largest message either side accepts: a few 224x224x3 cameras and a 50-step chunk are
#: well under 1 MiB; 256 MiB is rlmesh's own frame limit (wire.frames), kept for parity.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: Pause between tries while a server is busy (HTTP 503: all its sessions are taken).
_BUSY_RETRY_SECONDS = 0.02


def _connect_extra(client: Any) -> dict[str, Any]:
    """``legacy=True`` where websockets has it (16+): a connection now, not a reconnecting iterator."""
    try:
        params = inspect.signature(client.connect).parameters
    except (TypeError, ValueError):
        return {}
    return {"legacy": True} if "legacy" in params else {}


def _status(exc: BaseException) -> tuple[int, str] | None:
    """``(status, body)`` of a refused upgrade (``websockets``' ``InvalidStatus``), else ``None``."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if not isinstance(status, int):
        return None
    body = getattr(response, "body", b"") or b""
    text = (
        body.decode("utf-8", "replace").strip()
        if isinstance(body, (bytes, bytearray))
        else str(body)
    )
    return status, text


class Connection:
    """A connected openpi session: ``metadata``, then :meth:`infer` one observation at a time.

    Args:
        url: ``ws://host:port`` (or ``wss://``).
        connect_timeout_seconds: Bound on connecting, the upgrade and the metadata; also how
            long a busy server (HTTP 503) is retried.
        request_timeout_seconds: Bound on each reply (``None``: wait as long as it takes).
        max_message_bytes: Largest reply accepted.
        headers: Extra HTTP headers for the upgrade request (``Authorization: Bearer``).
        ssl_context: For ``wss://``: the client TLS context.

    Raises:
        AuthenticationFailed: the server refused the token (HTTP 401).
        ConnectFailed: nothing answers, the upgrade is refused, or the metadata never comes.
        EndpointBusy: the server kept answering "busy" until the connect timeout.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_seconds: float,
        request_timeout_seconds: float | None,
        max_message_bytes: int,
        headers: Mapping[str, str] | None = None,
        ssl_context: Any = None,
    ) -> None:
        self.url = url
        self.request_timeout_seconds = request_timeout_seconds
        self._packer = Packer()
        self._ws = self._dial(url, connect_timeout_seconds, max_message_bytes, headers, ssl_context)
        try:
            raw = self._ws.recv(timeout=connect_timeout_seconds)
        except BaseException as exc:
            self._ws.close()
            raise self._failure(exc, "waiting for its metadata", connect_timeout_seconds) from None
        if isinstance(raw, str):
            self._ws.close()
            raise ConnectFailed(f"the openpi server at {url} refused the session: {raw.strip()}")
        try:
            metadata = unpackb(raw)
        except ProtocolException as exc:
            self._ws.close()
            raise ConnectFailed(
                f"{url} sent no openpi metadata (is it an openpi policy server?): {exc}"
            ) from None
        self.metadata: dict[str, Any] = dict(metadata) if isinstance(metadata, Mapping) else {}

    @staticmethod
    def _dial(
        url: str,
        timeout: float,
        max_bytes: int,
        headers: Mapping[str, str] | None,
        ssl_context: Any = None,
    ) -> Any:
        client = _deps.websockets_client()
        deadline = time.monotonic() + timeout
        extra = _connect_extra(client)
        if ssl_context is not None:
            extra = {**extra, "ssl": ssl_context}
        busy = ""  # the server's last 503: a timeout after it is still "busy"
        while True:
            left = deadline - time.monotonic()
            try:
                return client.connect(
                    url,
                    **extra,
                    compression=None,  # as openpi's client: arrays do not deflate
                    max_size=max_bytes,
                    open_timeout=max(left, 0.001),
                    proxy=None,  # a policy server is dialled directly, never via $HTTP_PROXY
                    additional_headers=dict(headers) if headers else None,
                    user_agent_header="rlmesh-py openpi bridge",
                )
            except Exception as exc:
                refused = _status(exc)
                if refused is not None and refused[0] == 503:
                    busy = refused[1] or "all its sessions are taken"
                    if time.monotonic() + _BUSY_RETRY_SECONDS < deadline:
                        time.sleep(_BUSY_RETRY_SECONDS)
                        continue
                    raise EndpointBusy(
                        f"the openpi server at {url} is busy (waited {timeout:.1f}s): {busy}"
                    ) from None
                if refused is not None and refused[0] == 401:
                    raise AuthenticationFailed(
                        f"the openpi server at {url} refused this client: "
                        f"{refused[1] or 'authentication failed'}"
                    ) from None
                if refused is not None:
                    raise ConnectFailed(
                        f"the openpi server at {url} refused the connection with HTTP "
                        f"{refused[0]}: {refused[1] or '(no reason given)'}"
                    ) from None
                if isinstance(exc, TimeoutError) and busy:
                    raise EndpointBusy(
                        f"the openpi server at {url} is busy (waited {timeout:.1f}s): {busy}"
                    ) from None
                if isinstance(exc, TimeoutError):
                    raise ConnectFailed(
                        f"could not connect to the openpi server at {url} within {timeout:.1f}s"
                    ) from exc
                raise ConnectFailed(
                    f"could not connect to the openpi server at {url}: {type(exc).__name__}: {exc}; "
                    "is it running, and is the URL ws://host:port?"
                ) from exc

    def _failure(self, exc: BaseException, doing: str, timeout: float | None) -> Exception:
        """One exception of ours for anything the connection raised while ``doing``."""
        if isinstance(exc, TimeoutError):
            return RequestTimeout(
                f"the openpi server at {self.url} did not answer within {timeout:.3f}s ({doing})",
                timeout_seconds=timeout,
            )
        if isinstance(exc, _deps.websockets_exceptions().ConnectionClosed):
            rcvd = getattr(exc, "rcvd", None)
            why = f" (close code {rcvd.code}: {rcvd.reason})" if rcvd is not None else ""
            lost = ConnectionLost(
                f"the openpi server at {self.url} closed the connection{why} while {doing}"
            )
            lost.__cause__ = exc
            return lost
        if isinstance(exc, OSError):
            lost = ConnectionLost(
                f"the connection to the openpi server at {self.url} broke while {doing}: {exc}"
            )
            lost.__cause__ = exc
            return lost
        if isinstance(exc, ProtocolException):
            return exc
        return ConnectionLost(
            f"the openpi connection to {self.url} failed while {doing}: {type(exc).__name__}: {exc}"
        )

    def infer(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """Send one observation dict, return the server's reply dict.

        Raises:
            ModelError: the server answered with an error (its text is in the message).
            ConnectionLost: the connection closed or broke.
            RequestTimeout: no reply within ``request_timeout_seconds``.
            ProtocolException: the reply is not an openpi message.
        """
        self.send(observation)
        return self.receive()

    def send(self, observation: Mapping[str, Any]) -> None:
        """Send one observation (:meth:`receive` its reply; lanes pipeline their requests)."""
        data = self._packer.pack(observation)
        try:
            self._ws.send(data)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self.close()
            raise self._failure(exc, "sending an observation", None) from None

    def receive(self) -> dict[str, Any]:
        """The reply to the observation sent last (raises as :meth:`infer` does)."""
        try:
            raw = self._ws.recv(timeout=self.request_timeout_seconds)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self.close()
            raise self._failure(exc, "waiting for actions", self.request_timeout_seconds) from None
        if isinstance(raw, str):  # openpi's servers report a failure as text, then close
            self.close()
            raise ModelError(f"model error: the openpi server at {self.url} failed:\n{raw.strip()}")
        reply = unpackb(raw)
        if not isinstance(reply, dict):
            raise ProtocolException(
                f"the openpi server at {self.url} answered a {type(reply).__name__}, not a dict"
            )
        return reply

    def close(self) -> None:
        """Close the connection (idempotent; never raises)."""
        try:
            self._ws.close()
        except Exception:
            pass
