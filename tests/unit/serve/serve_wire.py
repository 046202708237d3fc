"""In-process helpers for the serve tests: a raw protocol client and small scripted envs.

The server under test runs in this process (a background thread, or the test's own
thread) on a unix socket in a short temp dir: no subprocess and no TCP. The client is
the sans-IO ``wire.Session(CLIENT)`` over a blocking socket, so a test sends exactly
the frames it means to (including ones a real client never would) and reads the
server's answers one by one.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rlmesh.errors import ConnectionLost
from rlmesh.transport.connection import Connection
from rlmesh.wire import handshake, messages as m
from rlmesh.wire.session import CLIENT, Session

TIMEOUT_SECONDS = 10.0  # every read is bounded; a healthy in-process server answers in microseconds


def frame_bytes(msg: Any, rid: int = 1, segments: list[Any] | tuple[Any, ...] = ()) -> bytes:
    """One frame as bytes (for pipelined or out-of-order frames a Session would refuse to send)."""
    return b"".join(bytes(memoryview(b).cast("B")) for b in m.encode_message(msg, rid, segments))


def unix_path(address: str) -> str:
    assert address.startswith("unix://"), address
    return address[len("unix://") :]


class Wire:
    """A raw client: ``request(msg)`` sends one request and returns the server's reply."""

    def __init__(self, address: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_SECONDS)
        sock.connect(unix_path(address))
        self.sock = sock
        self.conn = Connection(sock)
        self.session = Session(CLIENT)
        self.segments: list[Any] = []

    def send(self, msg: Any, segments: list[Any] | tuple[Any, ...] = ()) -> None:
        self.conn.send(self.session.send(msg, segments))

    def receive(self) -> Any:
        frame = self.conn.recv_frame()
        assert frame is not None
        self.segments = list(frame.segments)
        return self.session.receive(frame)

    def request(self, msg: Any, segments: list[Any] | tuple[Any, ...] = ()) -> Any:
        self.send(msg, segments)
        return self.receive()

    def hello(self, service: str = "env") -> Any:
        return self.request(handshake.make_hello("rlmesh-test", None, service=service))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> Any:
        """The next frame, decoded without the session's checks (``None`` at EOF)."""
        try:
            frame = self.conn.recv_frame()
        except ConnectionLost:
            return None
        assert frame is not None
        self.segments = list(frame.segments)
        return m.decode_header(frame)

    def closed_by_server(self) -> bool:
        """Whether the server closed this connection (reads EOF, discarding any frames first)."""
        for _ in range(64):
            try:
                frame = self.conn.recv_frame()
            except ConnectionLost:
                return True
            if frame is None:  # pragma: no cover - a blocking socket never runs dry
                return False
        return False

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScriptedEnv:
    """Box(-1, 1, (3,)) observations, Discrete(2) actions; episodes last ``length`` steps.

    Hooks make it misbehave on demand: ``fail_step`` raises from ``step``, ``obs`` is what
    ``step`` returns, ``release`` (an Event) blocks ``step`` until it is set.
    """

    def __init__(self, length: int = 3, render_mode: str | None = "rgb_array") -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}
        self.render_mode = render_mode
        self.length = length
        self.t = 0
        self.actions: list[int] = []
        self.seeds: list[Any] = []
        self.fail_step: BaseException | None = None
        self.obs: Any = None
        self.info: dict[str, Any] = {}
        self.release: threading.Event | None = None
        self.entered = threading.Event()
        self.closed = 0
        self.close_error: BaseException | None = None
        self.frame: Any = np.zeros((4, 6, 3), np.uint8)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        self.seeds.append(seed)
        self.t = 0
        return np.zeros(3, np.float32), {"reset": True}

    def step(self, action: Any) -> Any:
        self.entered.set()
        if self.release is not None:
            self.release.wait(TIMEOUT_SECONDS)
        if self.fail_step is not None:
            raise self.fail_step
        self.actions.append(int(action))
        self.t += 1
        obs = np.full(3, 0.5, np.float32) if self.obs is None else self.obs
        return obs, 1.0, self.t >= self.length, False, dict(self.info)

    def render(self) -> Any:
        return self.frame

    def close(self) -> None:
        self.closed += 1
        if self.close_error is not None:
            raise self.close_error


def obs_of(segments: list[Any]) -> list[float]:
    """The float32 observation a reply carried as its one segment."""
    return np.frombuffer(bytes(memoryview(segments[0]).cast("B")), np.float32).tolist()


@pytest.fixture(name="short_dir")
def short_dir_fixture() -> Iterator[Path]:
    """A short private directory for unix socket paths (they must stay under ~100 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rlm-u-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(name="started")
def started_fixture(short_dir: Path) -> Iterator[Callable[..., Any]]:
    """``started(cls, obj, **kwargs)``: ``cls(obj, unix address, **kwargs).start()``, shut down after the test."""
    servers: list[Any] = []

    def _start(cls: Any, obj: Any, **kwargs: Any) -> Any:
        server = cls(obj, f"unix://{short_dir}/s{len(servers)}.sock", **kwargs)
        servers.append(server)
        return server.start()

    yield _start
    for server in servers:
        server.shutdown()


@pytest.fixture(name="no_threads_left", autouse=True)
def no_threads_left_fixture() -> Iterator[None]:
    """Every thread a test starts ends with it: later tests' busy polling needs a single-threaded process."""
    before = set(threading.enumerate())
    yield
    for thread in set(threading.enumerate()) - before:
        thread.join(TIMEOUT_SECONDS)
        assert not thread.is_alive(), f"thread {thread.name!r} outlived the test"
