"""``term_safe``: peer-supplied text made harmless for a terminal (issue 28 item 10).

Env ids, camera labels (Dict keys, adapter roles), a ``Pong``'s state and service and the
messages of errors a peer sent are data. Printed raw, their control characters are commands
to the terminal: OSC 52 sets the clipboard, OSC 0 retitles the window, ``\\r`` or ``\\n``
forge whole lines ("serving: ..."), and bidi overrides reorder what the reader sees. Every
place that writes such text to a terminal passes it through :func:`term_safe`; JSON, HTTP
and Python values keep the text as it was.
"""

from __future__ import annotations

__all__ = ["term_safe"]


def _escape(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


# C0 controls but the tab, DEL, C1 controls (0x9b is a one-byte CSI, 0x9d a one-byte OSC), and the
# invisible characters that reorder or break lines: bidi marks, embeddings, overrides and
# isolates, the line and paragraph separators.
_UNSAFE = [
    *range(0x00, 0x09),
    *range(0x0A, 0x20),
    *range(0x7F, 0xA0),
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x2028,
    0x2029,
]
_TABLE = {cp: _escape(cp) for cp in _UNSAFE}
_TABLE_LINES = {k: v for k, v in _TABLE.items() if k != 0x0A}


def term_safe(text: object, *, newlines: bool = False) -> str:
    """``str(text)`` with every control character written as a visible escape.

    Args:
        text: Any value; it is converted with ``str``.
        newlines: Keep ``\\n`` (a multi-line message); by default it is escaped too, so a
            one-line field cannot start a line of its own.

    >>> term_safe("cam\\x1b]52;c;aGk=\\x07 \\r\\nserving: env")
    'cam\\\\x1b]52;c;aGk=\\\\x07 \\\\x0d\\\\x0aserving: env'
    >>> term_safe("line 1\\nline 2", newlines=True)
    'line 1\\nline 2'
    >>> term_safe("plain text, ünïcode, C:\\\\data and tabs\\tstay")
    'plain text, ünïcode, C:\\\\data and tabs\\tstay'
    """
    return str(text).translate(_TABLE_LINES if newlines else _TABLE)
