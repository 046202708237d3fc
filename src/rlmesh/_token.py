"""Endpoint tokens: where one comes from, how one is made, how two are compared.

A token is a shared secret that a server requires at the handshake and a client sends in
its ``Hello`` (docs/security.md). Both sides find it the same way: an explicit value first
(``ServeOptions(token=...)``, ``RemoteEnv(..., token=...)``), else the ``RLMESH_TOKEN``
environment variable; the command lines also read one from a file (``--token-file PATH``),
so it never shows in a process listing. Nothing here ever prints a token.
"""

from __future__ import annotations

import hmac
import os
import secrets

__all__ = [
    "TOKEN_ENV",
    "TLS_CA_ENV",
    "new_token",
    "read_token_file",
    "resolve_token",
    "token_matches",
]

#: The environment variable a server and a client read their token from.
TOKEN_ENV = "RLMESH_TOKEN"
#: The environment variable a client reads the CA bundle to trust for ``tls://`` from.
TLS_CA_ENV = "RLMESH_TLS_CA"
#: The longest token accepted (a token travels in the Hello, bounded by the handshake limits).
MAX_TOKEN_BYTES = 4096


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text): what fleets, sandboxes and runs generate.

    Example:
        >>> len(new_token()) >= 43
        True
    """
    return secrets.token_urlsafe(32)


def check_token(token: object, what: str = "token") -> str | None:
    """``token`` as a str (``None`` or ``""``: no token).

    Raises:
        TypeError: not a str.
        ValueError: longer than :data:`MAX_TOKEN_BYTES`, or with a line break or NUL in it.
    """
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"{what} must be a str or None, got {type(token).__name__}")
    if not token:
        return None
    if len(token.encode("utf-8", "surrogatepass")) > MAX_TOKEN_BYTES:
        raise ValueError(f"{what} is longer than {MAX_TOKEN_BYTES} bytes")
    if any(c in token for c in "\r\n\0"):
        raise ValueError(f"{what} contains a line break or a NUL character")
    return token


def resolve_token(token: str | None) -> str | None:
    """The token to use: ``token`` when given, else ``$RLMESH_TOKEN`` (``None``: no token).

    Example:
        >>> resolve_token("s3cret")
        's3cret'
    """
    if token is not None and token != "":
        return check_token(token)
    return check_token(os.environ.get(TOKEN_ENV) or None, f"${TOKEN_ENV}")


def read_token_file(path: str) -> str:
    """The token stored in ``path``: its text without surrounding whitespace (one trailing
    newline is what ``echo`` and editors leave).

    Raises:
        ValueError: the file cannot be read, is empty, or holds more than one line.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_TOKEN_BYTES + 2)
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"the token file {path!r} is not UTF-8 text") from None
    token = text.strip()
    if not token:
        raise ValueError(f"the token file {path!r} is empty; put the token on its first line")
    if "\n" in token or "\r" in token:
        raise ValueError(f"the token file {path!r} holds more than one line; keep only the token")
    checked = check_token(token, f"the token in {path!r}")
    assert checked is not None
    return checked


def token_matches(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (``hmac.compare_digest``)."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
