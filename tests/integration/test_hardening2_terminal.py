"""Issue 28 item 10: a peer's words never drive the user's terminal.

A hostile env or endpoint chooses camera labels (Dict keys, roles), a ``Pong``'s state and
service, and the messages of the errors it sends. Each test plants OSC 52 (set the
clipboard), OSC 0 (retitle the window), BEL, ``\\r``/``\\n`` (forge a "serving" line) and a
bidi override in one of them and reads what reaches the terminal (a pty, stdout, stderr, an
exception's text): escapes only, never the control characters themselves.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import sys
import termios
import threading
from typing import Any

import numpy as np
import pytest

import rlmesh.numpy as rnp
from rlmesh import cli
from rlmesh.errors import EnvironmentException
from rlmesh.transport import Connection
from rlmesh.view._core import Viewer
from rlmesh.view._sources import FrameSource
from rlmesh.view._terminal import TerminalBackend
from rlmesh.wire import handshake, messages as m

pytestmark = pytest.mark.timeout(60)

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # "set the clipboard to `rm -rf ~`"
TITLE = "\x1b]0;pwned\x07"
FORGED = "\r\nserving: env at tcp://evil:1 (ready, 0.1 ms)"
BIDI = "\u202e"
HOSTILE = f"x{OSC52}{TITLE}{FORGED}{BIDI}"
RAW = ("\x1b", "\x07", "\r", "\u202e")


def assert_inert(text: str, *, one_line: bool = True) -> None:
    for ch in RAW:
        assert ch not in text, f"{ch!r} reached the terminal: {text!r}"
    if one_line:
        assert "\n" not in text.strip("\n"), f"a line was forged: {text!r}"
    assert "\\x1b]52;c;" in text  # the escape is shown, so the user sees what was attempted


def _read_all(fd: int) -> str:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode("utf-8", "replace")


def test_camera_labels_are_escaped_on_the_terminal_viewer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels come from the env's Dict keys and roles; the footer shows them escaped."""
    for key in ("TMUX", "STY", "KITTY_WINDOW_ID", "TERM_PROGRAM"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    frame: Any = np.zeros((8, 8, 3), np.uint8)
    v = Viewer(
        [
            FrameSource(f"cam{HOSTILE}", "leaf", "a", lambda o, lane: None),
            FrameSource(f"wrist{TITLE}", "leaf", "b", lambda o, lane: None),
        ],
        fps=30,
    )
    term = TerminalBackend(v, out_fd=slave, in_fd=slave)
    try:
        term.start()
        term.frame((0, 0), frame, 0.0, 1)
        out = _read_all(master)
    finally:
        term.close()
        os.close(master)
        os.close(slave)
    footer = out[out.rindex("\x1b[K", 0, out.index("q quit")) :]  # our own escapes frame the footer
    assert "cam" in footer and "wrist" in footer
    assert (
        "\x1b]52" not in out and "\x1b]0;" not in out and "\x07" not in out and "\u202e" not in out
    )
    assert "\\x1b]52;c;" in out and "\\x1b]0;pwned" in out and "\\x0d\\x0aserving" in out


def _fake_endpoint(reply: Any) -> tuple[socket.socket, threading.Thread]:
    """Answer one Ping or Hello with ``reply(frame)`` (a message), then close."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        listener.settimeout(20)
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        sock.settimeout(20)
        conn = Connection(sock)
        try:
            while True:
                frame = conn.recv_frame()
                if frame is None:
                    return
                msg = reply(m.decode_header(frame))
                if msg is None:
                    continue
                sock.sendall(
                    b"".join(
                        bytes(memoryview(b).cast("B"))
                        for b in m.encode_message(msg, frame.request_id)
                    )
                )
        except Exception:
            return
        finally:
            sock.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return listener, t


def test_rlmesh_health_escapes_a_pongs_state_and_service(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listener, t = _fake_endpoint(
        lambda msg: m.Pong(state=f"ready{OSC52}", service=f"env{TITLE}{FORGED}{BIDI}")
    )
    try:
        port = listener.getsockname()[1]
        assert cli.main(["health", f"127.0.0.1:{port}"]) == 0
    finally:
        listener.close()
        t.join(20)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("serving: env")
    assert_inert(out)


def test_a_peers_error_message_is_escaped_in_the_exception_the_client_raises() -> None:
    import rlmesh

    real = rlmesh.EnvServer(_Cartpole(), "127.0.0.1:0")
    contract = real.env_contract.to_dict()
    real.shutdown()

    def reply(msg: Any) -> Any:
        if isinstance(msg, m.Hello):
            return handshake.answer_hello(
                msg,
                declared=None,
                service="env",
                component="fake",
                session_id="s",
                contract=contract,
            )
        return m.Error(
            code=0, message=f"reset failed: {HOSTILE}", recoverable=True, op=f"reset{TITLE}"
        )

    listener, t = _fake_endpoint(reply)
    try:
        env = rnp.RemoteEnv(f"127.0.0.1:{listener.getsockname()[1]}", request_timeout_seconds=20)
        with pytest.raises(EnvironmentException) as info:
            env.reset()
        env.close()
    finally:
        listener.close()
        t.join(20)
    assert_inert(str(info.value))
    assert "\x1b" not in info.value.op


def test_the_serve_commands_error_line_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from rlmesh._cli._serving import run_command

    def body() -> int:
        raise RuntimeError(f"env failed: {HOSTILE}")

    assert run_command(argparse.Namespace(verbose=False), body) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: RuntimeError: env failed: x")
    assert_inert(err, one_line=False)  # a local message may span lines; no \r rewrites one


def test_json_keeps_the_peers_text_as_data() -> None:
    """Only terminal output is escaped: the viewer's JSON documents carry the label as it was."""
    v = Viewer([FrameSource(f"cam{OSC52}", "leaf", "a", lambda o, lane: None)], fps=30)
    assert v.sources_doc()["sources"] == [f"cam{OSC52}"]


class _Cartpole:
    def __init__(self) -> None:
        import gymnasium as gym

        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(4, np.float32), 0.0, False, False, {}

    def close(self) -> None:
        pass


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("pty tests need POSIX", allow_module_level=True)
