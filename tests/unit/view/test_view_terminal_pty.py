"""The terminal backend on a pseudo-terminal: takeover and restore, half-blocks, Kitty/iTerm2 inline images (VIEW-11, VIEW-14)."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
from typing import Any

import numpy as np
import pytest

from rlmesh.view._core import Viewer
from rlmesh.view._sources import FrameSource
from rlmesh.view._terminal import TerminalBackend


def _read_all(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def _backend(monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[TerminalBackend, int, int]:
    for key in ("TMUX", "STY", "KITTY_WINDOW_ID", "TERM_PROGRAM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    v = Viewer(
        [
            FrameSource("a", "leaf", "a", lambda o, lane: None),
            FrameSource("b", "leaf", "b", lambda o, lane: None),
        ],
        fps=30,
    )
    return TerminalBackend(v, out_fd=slave, in_fd=slave), master, slave


FRAME: Any = np.zeros((40, 60, 3), np.uint8)
FRAME[:20] = (255, 0, 0)


def test_view11_halfblocks_on_a_pty_and_the_terminal_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    term, master, slave = _backend(monkeypatch, TERM="xterm-256color")
    before = termios.tcgetattr(slave)
    try:
        term.start()
        during = termios.tcgetattr(slave)
        assert (
            not during[3] & termios.ECHO and not during[3] & termios.ISIG
        )  # keys raw, Ctrl-C is a key
        term.frame((0, 0), FRAME, 0.0, 1)
        out = _read_all(master).decode("utf-8", "replace")
        assert "\x1b[?1049h" in out and "\x1b[?25l" in out  # alternate screen, hidden cursor
        assert out.count("▀") > 50 and "38;2;255;0;0" in out
        assert "[a]" in out and "q quit" in out
        os.write(master, b"\x1b[C")  # Right: next source, read by the key thread
        for _ in range(50):
            if term.viewer.selected == 1:
                break
            select.select([], [], [], 0.05)
        assert term.viewer.selected == 1
    finally:
        term.close()
        out = _read_all(master).decode("utf-8", "replace")
        assert "\x1b[?1049l" in out and "\x1b[?25h" in out
        assert termios.tcgetattr(slave) == before
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize(
    ("env", "marker"),
    [
        ({"TERM": "xterm-kitty"}, "\x1b_Gf=100,a=T"),
        ({"TERM_PROGRAM": "iTerm.app", "TERM": "xterm"}, "\x1b]1337;File=inline=1"),
    ],
)
def test_view14_native_inline_images_by_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], marker: str
) -> None:
    # Pillow (a test dependency) encodes the inline PNGs
    term, master, slave = _backend(monkeypatch, **env)
    try:
        term.start()
        term.frame((0, 0), FRAME, 0.0, 1)
        term.frame((0, 0), FRAME, 0.0, 2)
        out = _read_all(master).decode("utf-8", "replace")
        assert out.count(marker) == 2 and "▀" not in out
        if "kitty" in env.get("TERM", ""):
            assert (
                "i=1," in out and "i=2," in out and "\x1b_Ga=d,d=i,i=1,q=2" in out
            )  # double-buffered
    finally:
        term.close()
        os.close(master)
        os.close(slave)


def test_view14_tmux_forces_halfblocks(monkeypatch: pytest.MonkeyPatch) -> None:
    term, master, slave = _backend(monkeypatch, TERM="xterm-kitty", TMUX="/tmp/x,1,0")
    try:
        assert term.protocol == "halfblock"
    finally:
        os.close(master)
        os.close(slave)
