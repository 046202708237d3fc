"""The terminal backend (VIEW-11..15): alternate screen, truecolor half-blocks, a HUD footer, keys.

The terminal is taken over on start (alternate screen, hidden cursor, keys read
without echo and with Ctrl-C delivered as a key) and restored on close. One
thread reads keys (``select`` with a 100 ms timeout, the only stdin reader);
frames are drawn by the viewer's pump thread, one ``write`` per frame.

Keys: Right/Tab/Space next camera, Left previous, 1-9 pick a camera, ``n`` end
the episode, ``p`` pause/resume, ``.`` single step, ``q``/Esc/Ctrl-C/Ctrl-D quit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import threading
import time
from typing import Any

import numpy as np

from .._termtext import term_safe
from ._core import Viewer, ViewerError
from ._encode import make_encoder
from ._hud import format_hud

__all__ = [
    "TerminalBackend",
    "fit_size",
    "graphics_protocol",
    "halfblock_rows",
    "inline_image",
    "parse_keys",
]

#: Long side cap of inline (Kitty / iTerm2) PNG images (VIEW-14, P-6).
INLINE_MAX_SIDE = 1024

_ENTER = "\x1b[?1049h\x1b[?25l\x1b[2J"
_LEAVE = "\x1b[0m\x1b[2J\x1b[?25h\x1b[?1049l"
_HINT = "n skip ep · p pause · . step · q quit"


def fit_size(h: int, w: int, cols: int, rows: int) -> tuple[int, int]:
    """Pixel size ``(ph, pw)`` of an ``h x w`` image fitted into ``cols x rows`` half-block cells
    (``2 * rows`` pixel rows), aspect kept, height even (VIEW-14).

    >>> fit_size(480, 640, 80, 22)
    (44, 58)
    >>> fit_size(10, 10, 80, 22)
    (44, 44)
    """
    if h <= 0 or w <= 0 or cols <= 0 or rows <= 0:
        return 0, 0
    scale = min(cols / w, (2 * rows) / h)
    pw = max(1, min(cols, int(w * scale)))
    ph = max(2, min(2 * rows, int(h * scale)))
    return ph - (ph % 2), pw


def halfblock_rows(img: np.ndarray[Any, Any]) -> list[str]:
    """Rows of truecolor ``▀`` cells (fg = top pixel, bg = bottom pixel) for an even-height RGB image;
    colour escapes are emitted only when the colour changes (VIEW-14)."""
    packed = (
        (img[:, :, 0].astype(np.uint32) << 16)
        | (img[:, :, 1].astype(np.uint32) << 8)
        | img[:, :, 2]
    )
    out: list[str] = []
    for r in range(0, packed.shape[0] - 1, 2):
        parts: list[str] = []
        pt = pb = -1
        for t, b in zip(packed[r].tolist(), packed[r + 1].tolist()):
            if t != pt:
                parts.append(f"\x1b[38;2;{t >> 16};{(t >> 8) & 255};{t & 255}m")
                pt = t
            if b != pb:
                parts.append(f"\x1b[48;2;{b >> 16};{(b >> 8) & 255};{b & 255}m")
                pb = b
            parts.append("▀")
        parts.append("\x1b[0m")
        out.append("".join(parts))
    return out


def graphics_protocol(environ: dict[str, str] | None = None) -> str:
    """``"kitty"``, ``"iterm"`` or ``"halfblock"``, from environment variables only (VIEW-14).

    tmux and screen always get half-blocks (inline images do not survive them).

    >>> graphics_protocol({"TERM": "xterm-kitty"}), graphics_protocol({"TERM_PROGRAM": "WezTerm"})
    ('kitty', 'iterm')
    >>> graphics_protocol({"TERM": "xterm-kitty", "TMUX": "/tmp/t,1,0"}), graphics_protocol({"TERM": "xterm-256color"})
    ('halfblock', 'halfblock')
    """
    env = os.environ if environ is None else environ
    term = env.get("TERM", "").lower()
    prog = env.get("TERM_PROGRAM", "")
    if env.get("TMUX") or env.get("STY") or term.startswith(("screen", "tmux")):
        return "halfblock"
    if (
        "kitty" in term
        or "ghostty" in term
        or prog.lower() == "ghostty"
        or env.get("KITTY_WINDOW_ID")
    ):
        return "kitty"
    if prog in ("iTerm.app", "WezTerm", "mintty"):
        return "iterm"
    return "halfblock"


def inline_image(
    png: bytes, protocol: str, cols: int, rows: int, *, image_id: int = 1, z: int = 0
) -> str:
    """The escape sequence drawing ``png`` into ``cols x rows`` cells with Kitty's or iTerm2's protocol.

    Kitty: base64 in 4096-byte chunks (``m=1`` until the last), quiet (``q=2``), image ``image_id``
    at stacking order ``z``. iTerm2: one OSC 1337 ``File=inline=1`` sequence.

    >>> inline_image(b"x" * 4000, "kitty", 10, 5, image_id=2, z=7).count("\x1b_G")
    2
    >>> inline_image(b"png", "iterm", 10, 5).startswith("\x1b]1337;File=inline=1;width=10;height=5")
    True
    """
    import base64

    data = base64.b64encode(png).decode("ascii")
    if protocol == "iterm":
        return f"\x1b]1337;File=inline=1;width={cols};height={rows};preserveAspectRatio=1;size={len(png)}:{data}\x07"
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)] or [""]
    out = []
    for n, chunk in enumerate(chunks):
        more = 1 if n < len(chunks) - 1 else 0
        if n == 0:
            out.append(
                f"\x1b_Gf=100,a=T,i={image_id},p=1,c={cols},r={rows},z={z},C=1,q=2,m={more};{chunk}\x1b\\"
            )
        else:
            out.append(f"\x1b_Gm={more};{chunk}\x1b\\")
    return "".join(out)


def _resize(frame: np.ndarray[Any, Any], ph: int, pw: int) -> np.ndarray[Any, Any]:
    ys = (np.arange(ph) * frame.shape[0] // ph).clip(0, frame.shape[0] - 1)
    xs = (np.arange(pw) * frame.shape[1] // pw).clip(0, frame.shape[1] - 1)
    out: np.ndarray[Any, Any] = frame[ys[:, None], xs[None, :]]
    return out


def parse_keys(data: bytes) -> list[str]:
    """Control requests for the bytes of one key read (VIEW-12).

    >>> parse_keys(b"\\x1b[C"), parse_keys(b"\\x1b[D"), parse_keys(b"3"), parse_keys(b"n"), parse_keys(b"\\x03")
    (['next'], ['prev'], ['select:2'], ['skip'], ['quit'])
    """
    out: list[str] = []
    i = 0
    while i < len(data):
        if data[i : i + 3] == b"\x1b[C":
            out.append("next")
            i += 3
            continue
        if data[i : i + 3] == b"\x1b[D":
            out.append("prev")
            i += 3
            continue
        if data[i : i + 2] == b"\x1b[" and i + 2 < len(data):  # another CSI sequence: ignore
            i += 3
            continue
        c = data[i : i + 1]
        i += 1
        if c in (b"\t", b" "):
            out.append("next")
        elif c.isdigit() and c != b"0":
            out.append(f"select:{int(c) - 1}")
        elif c in (b"n", b"N"):
            out.append("skip")
        elif c in (b"p", b"P"):
            out.append("toggle")
        elif c == b".":
            out.append("step")
        elif c in (b"q", b"Q", b"\x1b", b"\x03", b"\x04"):
            out.append("quit")
    return out


class TerminalBackend:
    """Draw the selected camera and the HUD in the terminal; read keys."""

    name = "terminal"

    def __init__(self, viewer: Viewer, *, out_fd: int = 1, in_fd: int = 0) -> None:
        if not os.isatty(out_fd):
            raise ViewerError("terminal backend unavailable (stdout not a TTY?)")
        self.viewer = viewer
        self.out_fd = out_fd
        self.in_fd = in_fd if os.isatty(in_fd) else -1
        self._saved: Any = None
        self._lock = threading.Lock()
        self._last: np.ndarray[Any, Any] | None = None
        self._size = (0, 0)
        self._closed = False
        self._keys: threading.Thread | None = None
        self._last_hud = 0.0
        self.protocol = graphics_protocol()
        self._png: Any = None
        if self.protocol != "halfblock":
            try:
                self._png = make_encoder("png", 100)[0]
            except ImportError:
                self.protocol = "halfblock"
        self._kitty_id = 0
        self._z = 0

    def start(self) -> None:
        if self.in_fd >= 0:
            try:
                import termios

                self._saved = termios.tcgetattr(self.in_fd)
                mode = termios.tcgetattr(self.in_fd)
                mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
                mode[0] &= ~(termios.IXON | termios.ICRNL)
                mode[6][termios.VMIN] = 0
                mode[6][termios.VTIME] = 0
                termios.tcsetattr(self.in_fd, termios.TCSANOW, mode)
            except Exception:
                self._saved = None
        self._write(_ENTER)
        atexit.register(self.close)  # a session never closed still gives the terminal back
        self._size = self._term_size()
        self._keys = threading.Thread(target=self._key_loop, name="rlmesh-view-keys", daemon=True)
        self._keys.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        keys = self._keys
        if keys is not None:
            keys.join(timeout=1.0)
        with self._lock:
            self._write(("\x1b_Ga=d,d=A,q=2\x1b\\" if self.protocol == "kitty" else "") + _LEAVE)
        if self._saved is not None:
            try:
                import termios

                termios.tcsetattr(self.in_fd, termios.TCSANOW, self._saved)
            except Exception:
                pass

    # -- drawing -----------------------------------------------------------------------------

    def _term_size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.out_fd)
            if size.columns > 0 and size.lines > 0:
                return size.columns, size.lines
        except OSError:
            pass
        size = shutil.get_terminal_size((80, 24))
        return size.columns, size.lines

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        with contextlib.suppress(OSError):
            while data:
                n = os.write(self.out_fd, data)
                data = data[n:]

    def frame(
        self, key: tuple[int, int], frame: np.ndarray[Any, Any], stamp: float, seq: int
    ) -> None:
        if key != (self.viewer.selected, self.viewer.selected_lane):
            return
        self._last = frame
        self._draw()

    def meta(self, now: float) -> None:
        """Redraw the footer (and the cached frame after a resize) between frames."""
        size = self._term_size()
        if size != self._size:
            self._size = size
            self._draw(clear=True)
        elif now - self._last_hud >= 0.25:
            self._draw(image=False)

    def _footer(self, cols: int) -> str:
        v = self.viewer
        # labels are Dict keys and roles the env chose: escaped, so they cannot drive the terminal (issue 28)
        names = [term_safe(label) for label in v.labels]
        labels = [
            f"\x1b[1m[{label}]\x1b[22m" if i == v.selected else label
            for i, label in enumerate(names)
        ]
        if v.lanes > 1:
            labels.append(f"lane {v.selected_lane}/{v.lanes}")
        if v.paused:
            labels.append("\x1b[1mPAUSED\x1b[22m")
        line1 = "  ".join(labels) + f"   \x1b[2m{_HINT}\x1b[22m"
        line2 = "\x1b[2m" + term_safe(format_hud(v.hud_doc(), max(20, cols - 1))) + "\x1b[22m"
        return f"\x1b[K{line1}\r\n\x1b[K{line2}\x1b[K"

    def _draw(self, *, image: bool = True, clear: bool = False) -> None:
        cols, rows = self._size if self._size != (0, 0) else self._term_size()
        img_rows = max(1, rows - 2)
        parts = ["\x1b[2J" if clear else "", "\x1b[H"]
        frame = self._last
        after = ""
        if image and frame is not None and self._png is not None:
            parts.append(self._inline(frame, cols, img_rows))
            if self.protocol == "kitty" and self._kitty_id:
                prev = (
                    2 if self._kitty_id == 1 else 1
                )  # double-buffered: drop the previous image after the new one
                after = f"\x1b_Ga=d,d=i,i={prev},q=2\x1b\\"
        elif image and frame is not None:
            ph, pw = fit_size(frame.shape[0], frame.shape[1], cols, img_rows)
            if ph and pw:
                lines = halfblock_rows(_resize(frame, ph, pw))
                parts.append("\x1b[K\r\n".join(lines))
        parts.append(after)
        parts.append(f"\x1b[{img_rows + 1};1H")
        parts.append(self._footer(cols))
        self._last_hud = time.perf_counter()
        with self._lock:
            if not self._closed:
                self._write("".join(parts))

    def _inline(self, frame: np.ndarray[Any, Any], cols: int, rows: int) -> str:
        h, w = frame.shape[0], frame.shape[1]
        if max(h, w) > INLINE_MAX_SIDE:
            scale = INLINE_MAX_SIDE / max(h, w)
            frame = _resize(frame, max(1, int(h * scale)), max(1, int(w * scale)))
        png = self._png(frame)
        self._kitty_id = 2 if self._kitty_id == 1 else 1
        self._z += 1
        return inline_image(png, self.protocol, cols, rows, image_id=self._kitty_id, z=self._z)

    # -- keys --------------------------------------------------------------------------------

    def _key_loop(self) -> None:
        fd = self.in_fd
        while not self._closed and not self.viewer.closed:
            if fd < 0:
                time.sleep(0.1)
                continue
            try:
                ready, _, _ = select.select([fd], [], [], 0.1)
            except (OSError, ValueError):
                return
            if not ready:
                continue
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                time.sleep(0.1)
                continue
            for op in parse_keys(data):
                if op.startswith("select:"):
                    self.viewer.request("select", source=int(op[7:]))
                else:
                    self.viewer.request(op)
