"""TLS for ``tls://host:port`` endpoints: the standard library's :mod:`ssl`, nothing more.

A server gets a context from its certificate chain and key (and, to require client
certificates, a CA bundle); a client verifies the server against the system's trust store,
or the CA bundle it is given (``tls_ca=``, ``RLMESH_TLS_CA``), and checks the host name.

:class:`TLSSocket` puts an ``ssl.SSLSocket`` behind the stream socket calls the framed
stream makes (``send``, ``sendmsg``, ``recv_into`` ...), so the stream, the serve loop and
the clients stay as they are: a would-block TLS read or write is a ``BlockingIOError``
like a plain socket's, and a server-side handshake progresses on the connection's first
reads, so no accept ever blocks the serve loop. Busy polling stays off on TLS connections
(its spinning read bypasses the socket object).

One record never carries the end of one frame and the start of the next (each frame goes
out in its own write), so a frame read to its end leaves nothing decrypted behind in the
``ssl`` object that readiness polling on the descriptor could miss.

``ssl`` is imported when a TLS context is first made: endpoints without TLS never load it.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, TypeVar

from .._token import TLS_CA_ENV

__all__ = ["TLSSocket", "client_context", "describe_failure", "handshake_client", "server_context"]

log = logging.getLogger("rlmesh.transport")

#: Client certificate and key for servers that require one (``--tls-client-ca``), when the
#: client was not handed a whole ``ssl.SSLContext``.
TLS_CERT_ENV = "RLMESH_TLS_CERT"
TLS_KEY_ENV = "RLMESH_TLS_KEY"


def _ssl() -> Any:
    import ssl

    return ssl


def server_context(cert: str, key: str, client_ca: str | None = None) -> Any:
    """An ``ssl.SSLContext`` for a server: TLS 1.2 or later, its certificate chain and key,
    and with ``client_ca`` a required client certificate signed by that CA.

    Raises:
        ValueError: a file cannot be read or does not hold what it should (named).
    """
    ssl = _ssl()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise ValueError(
            f"TLS: {exc.filename or cert} does not exist (--tls-cert / --tls-key)"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(
            f"TLS: cannot load the certificate {cert!r} with the key {key!r}: {_reason(exc)}; "
            "pass a PEM certificate chain and its matching private key"
        ) from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"TLS: cannot load the client CA bundle {client_ca!r} (--tls-client-ca): {_reason(exc)}"
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls_ca: Any = None) -> Any:
    """An ``ssl.SSLContext`` for a client: verify the server and its host name.

    ``tls_ca``: a PEM CA bundle path to trust instead of the system store, or an
    ``ssl.SSLContext`` of your own (returned as it is). ``None``: ``$RLMESH_TLS_CA`` when
    set, else the system store. ``$RLMESH_TLS_CERT`` / ``$RLMESH_TLS_KEY`` name a client
    certificate for servers that require one.

    Raises:
        ValueError: a file cannot be read (named).
    """
    ssl = _ssl()
    if isinstance(tls_ca, ssl.SSLContext):
        return tls_ca
    if tls_ca is not None and not isinstance(tls_ca, (str, os.PathLike)):
        raise TypeError(
            f"tls_ca must be a path to a PEM CA bundle, an ssl.SSLContext or None, got {type(tls_ca).__name__}"
        )
    cafile = os.fspath(tls_ca) if tls_ca is not None else (os.environ.get(TLS_CA_ENV) or None)
    try:
        ctx = ssl.create_default_context(cafile=cafile)
    except (ssl.SSLError, OSError) as exc:
        where = f"tls_ca={cafile!r}" if tls_ca is not None else f"${TLS_CA_ENV}={cafile!r}"
        raise ValueError(f"TLS: cannot load the CA bundle {where}: {_reason(exc)}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = os.environ.get(TLS_CERT_ENV), os.environ.get(TLS_KEY_ENV)
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"TLS: cannot load the client certificate ${TLS_CERT_ENV}={cert!r}: {_reason(exc)}"
            ) from None
    return ctx


def handshake_client(sock: socket.socket, host: str, ctx: Any, timeout: float | None) -> TLSSocket:
    """Wrap a connected socket and complete the TLS handshake within ``timeout``.

    Raises:
        ssl.SSLError: the handshake failed (the caller words it with :func:`describe_failure`).
        TimeoutError: no handshake within ``timeout``.
    """
    sock.settimeout(timeout)
    tls = ctx.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=True)
    return TLSSocket(tls, handshaken=True)


def describe_failure(exc: BaseException, host: str) -> str:
    """What a failed client handshake means, in words a user can act on (the host named)."""
    ssl = _ssl()
    if isinstance(exc, ssl.SSLCertVerificationError):
        what = exc.verify_message or _reason(exc)
        if exc.verify_code in (18, 19, 20, 21):  # self-signed, unknown issuer, untrusted chain
            hint = (
                "the certificate is not signed by a CA this client trusts: pass tls_ca=PATH (or set "
                f"${TLS_CA_ENV}) naming the CA bundle that signed the server's certificate"
            )
        elif exc.verify_code == 10:
            hint = "the server's certificate has expired: renew it"
        elif exc.verify_code == 62 or "hostname" in str(exc).lower():
            hint = f"the server's certificate is not valid for {host!r}: dial the name it was issued for"
        else:
            hint = "check the server's certificate and the CA bundle this client trusts"
        return f"TLS handshake with {host!r} failed: the server's certificate was refused ({what}); {hint}"
    reason = _reason(exc)
    if "CERTIFICATE_REQUIRED" in reason.upper() or "HANDSHAKE_FAILURE" in reason.upper():
        return (
            f"TLS handshake with {host!r} failed ({reason}): the server may require a client "
            f"certificate: set ${TLS_CERT_ENV} and ${TLS_KEY_ENV}, or pass tls_ca= an ssl.SSLContext "
            "with one loaded"
        )
    if "WRONG_VERSION_NUMBER" in reason.upper() or "RECORD_LAYER" in reason.upper():
        return (
            f"TLS handshake with {host!r} failed ({reason}): the endpoint does not speak TLS; "
            "dial it as tcp://host:port"
        )
    return f"TLS handshake with {host!r} failed: {reason}"


_EOF = TypeVar("_EOF", int, bytes)


def _read_error(exc: BaseException, eof: _EOF) -> _EOF:
    """A read's ``ssl`` error as the socket call's: no record yet is ``BlockingIOError``, the
    peer's close is EOF (``eof``), anything else a reset connection."""
    ssl = _ssl()
    if isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
        raise BlockingIOError("no TLS record yet") from None
    if isinstance(exc, ssl.SSLZeroReturnError):
        return eof  # the peer closed the TLS session
    raise ConnectionResetError(f"TLS: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = getattr(exc, "strerror", None) or str(exc)
    return f"{reason}: {text}" if reason and reason not in text else str(text)


class TLSSocket:
    """An ``ssl.SSLSocket`` with the plain socket's would-block behaviour, for the framed stream.

    A server-side socket (``handshaken=False``, non-blocking) completes its handshake on
    its first reads; a failed handshake is logged with the peer and reads as a reset.
    """

    __slots__ = ("_peer", "_ssl", "family", "handshaken")

    tls = True

    def __init__(self, sslsock: Any, *, handshaken: bool) -> None:
        self._ssl = sslsock
        self.family = sslsock.family
        self.handshaken = handshaken
        self._peer = ""

    @classmethod
    def accept(cls, sock: socket.socket, ctx: Any) -> TLSSocket:
        """Server side: wrap an accepted, non-blocking socket; the handshake happens on reads."""
        try:
            host, port = sock.getpeername()[:2]
            peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        except (OSError, ValueError, TypeError):
            peer = "an unknown peer"
        wrapped = cls(
            ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), handshaken=False
        )
        wrapped._peer = peer
        return wrapped

    def _handshake(self) -> None:
        ssl = _ssl()
        try:
            self._ssl.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError("TLS handshake in progress") from None
        except ssl.SSLError as exc:
            log.warning("TLS handshake with a client at %s failed: %s", self._peer, _reason(exc))
            raise ConnectionResetError(f"TLS handshake failed: {_reason(exc)}") from None
        self.handshaken = True

    # -- the stream socket calls ------------------------------------------------------------

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if not self.handshaken:
            self._handshake()
        try:
            return int(self._ssl.recv_into(buffer, nbytes))
        except _ssl().SSLError as exc:  # evaluated only on an error
            return _read_error(exc, 0)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        # the supervisor's TLS relay reads this way, several times a step: the ``ssl`` read
        # itself, not a zeroed ``bufsize`` buffer copied twice
        if not self.handshaken:
            self._handshake()
        try:
            return self._ssl.recv(bufsize)  # type: ignore[no-any-return]
        except _ssl().SSLError as exc:
            return _read_error(exc, b"")

    def send(self, data: Any, flags: int = 0) -> int:
        ssl = _ssl()
        try:
            return int(self._ssl.send(data))
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError("TLS write would block") from None
        except ssl.SSLEOFError as exc:
            raise BrokenPipeError(f"TLS: {_reason(exc)}") from None
        except ssl.SSLError as exc:
            raise ConnectionResetError(f"TLS: {_reason(exc)}") from None

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        # TLS encrypts what it is given in records: one joined write per frame (the stream
        # retries the same bytes after a would-block, as the ssl module requires)
        data = b"".join(b if type(b) is bytes else memoryview(b).cast("B") for b in buffers)
        return self.send(data)

    def sendall(self, data: Any) -> None:
        self._ssl.sendall(data)

    def pending(self) -> int:
        """Decrypted bytes the ``ssl`` object holds that the descriptor no longer shows."""
        return int(self._ssl.pending())

    def fileno(self) -> int:
        return int(self._ssl.fileno())

    def gettimeout(self) -> float | None:
        t = self._ssl.gettimeout()
        return None if t is None else float(t)

    def settimeout(self, value: float | None) -> None:
        self._ssl.settimeout(value)

    def setblocking(self, flag: bool) -> None:
        self._ssl.setblocking(flag)

    def setsockopt(self, *args: Any) -> None:
        self._ssl.setsockopt(*args)

    def getsockopt(self, *args: Any) -> Any:
        return self._ssl.getsockopt(*args)

    def getpeername(self) -> Any:
        return self._ssl.getpeername()

    def getsockname(self) -> Any:
        return self._ssl.getsockname()

    def shutdown(self, how: int) -> None:
        self._ssl.shutdown(how)

    def close(self) -> None:
        self._ssl.close()
