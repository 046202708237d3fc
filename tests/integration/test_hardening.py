"""Issue 18 attacks: no frame, peer, timeout or signal takes a server or a session down.

One test (or a small group) per defect class, each written as the attack: nesting bombs
in every decoder of peer bytes on both ends (defect 1), a peer that never reads during
an active session (2), timeouts before and during ring attach (3), a model spec that
cannot travel (4), trickled and stale replies (5), shutdown with a hung env (6), a
foreign-uid ring attach (7), a symlinked ready file (8), an oversized observation (9),
deep spaces (10), and the safe defaults (loopback bind, SIGTERM, serve() on Ctrl-C,
step before reset). Every loop is bounded in count and time; no test asserts a
wall-clock threshold (the timeout tests check the attacker was still at it when the
client gave up).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hardening_envs import DelayEnv
from integration_envs import BlockingEnv

import rlmesh
import rlmesh.numpy as rnp
from conftest import child_env, in_loopback_namespace, startup_line, stop_process
from rlmesh.errors import CODE_NUMBERS, ProtocolException, RequestTimeout
from rlmesh.serve import ServeOptions, ping
from rlmesh.serve._loop import MAX_STRANGER_REPLIES
from rlmesh.transport import Connection, shm
from rlmesh.transport.address import parse_connect_address
from rlmesh.wire import handshake, messages as m
from rlmesh.wire.frames import encode_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


# A msgpack value nested `depth` arrays deep: the attack of defect 1.
def bomb(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


def raw_frame(kind: int, header: bytes, rid: int = 1) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_frame(kind, rid, header))


def frame_of(msg: Any, rid: int = 1) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in m.encode_message(msg, rid))


def dial(address: str) -> socket.socket:
    addr = parse_connect_address(address)
    if addr.transport == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(addr.path)
    else:
        sock = socket.create_connection((addr.host, addr.port))
    sock.settimeout(20)
    return sock


def read_reply(conn: Connection) -> Any:
    """The next frame's message, or ``None`` when the server closed the connection."""
    try:
        frame = conn.recv_frame()
    except (ConnectionError, OSError):
        return None
    assert frame is not None
    return m.decode_header(frame)


def closed_by_server(conn: Connection) -> bool:
    return read_reply(conn) is None


def hello(sock: socket.socket) -> tuple[Connection, m.Welcome]:
    conn = Connection(sock)
    sock.sendall(frame_of(handshake.make_hello("attacker", None)))
    welcome = read_reply(conn)
    assert isinstance(welcome, m.Welcome), welcome
    return conn, welcome


def assert_serves_a_real_client(address: str) -> None:
    assert ping(address).state == "ready"
    with rnp.RemoteEnv(address, request_timeout_seconds=20) as env:
        env.reset(seed=0)
        for i in range(3):
            env.step(i % 2)


# -- defect 1: nesting bombs --------------------------------------------------------------


@pytest.mark.parametrize("depth", [200, 1_100, 100_000])
@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_nested_ping_before_hello_gets_a_protocol_error_and_the_server_lives(
    serve, transport, depth
):
    """Defect 1: the issue's frame (a Ping whose header carries one extra element nested
    ~1,100 deep) used to raise RecursionError out of the serve loop and end the process."""
    server = serve(DelayEnv(), transport=transport)
    sock = dial(server.address)
    conn = Connection(sock)
    sock.sendall(raw_frame(m.Ping.KIND, b"\x91" + bomb(depth)))
    reply = read_reply(conn)
    assert isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"]
    assert "nests deeper than" in reply.message
    assert closed_by_server(conn)
    sock.close()
    assert_serves_a_real_client(server.address)


def _reset_header(
    options: bytes,
) -> bytes:  # Reset: [seeds, options, episode_ids, env_indices, timeout_ms]
    return b"\x95\x90" + options + b"\x90\x90\x00"


def _step_header(action: bytes) -> bytes:  # Step: [action, episode_ids, timeout_ms, has_action]
    return b"\x94\x91" + action + b"\x80\x00\xc3"


@pytest.mark.parametrize(
    "what,kind,header",
    [
        ("Reset.options", m.Reset.KIND, _reset_header(b"\x81\xa1k" * 5_000 + b"\xc0")),
        ("Reset.options (arrays)", m.Reset.KIND, _reset_header(bomb(50_000))),
        ("Step.action", m.Step.KIND, _step_header(bomb(50_000))),
        ("Configure trailing field", m.Configure.KIND, b"\x92\xa0" + bomb(50_000)),
    ],
)
def test_a_nesting_bomb_in_a_session_request_closes_only_that_session(serve, what, kind, header):
    """Defect 1 through Any-typed fields (Reset.options, Step.action) and skipped trailing
    fields: the session gets Error(PROTOCOL) and is closed, the env is never called."""
    env = DelayEnv()
    server = serve(env)
    sock = dial(server.address)
    conn, _ = hello(sock)
    sock.sendall(raw_frame(kind, header, rid=2))
    reply = read_reply(conn)
    assert isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"], (what, reply)
    assert closed_by_server(conn)
    sock.close()
    assert env.calls == []
    assert_serves_a_real_client(server.address)


def test_a_nesting_bomb_through_the_shared_memory_ring_closes_only_that_session(serve_process):
    """Defect 1 on the ring path: the same bytes written into a session's ring."""
    _proc, address = serve_process("hardening_envs:make_delay_env")
    env = rnp.RemoteEnv(address, request_timeout_seconds=20)
    env.reset(seed=0)
    for i in range(4):
        env.step(i % 2)
    conn = env._session.conn
    if conn.shm is None:
        pytest.skip(
            "this host does not use shared-memory rings (single CPU, not x86-64 Linux, or RLMESH_SHM=0)"
        )
    conn.send([raw_frame(m.Ping.KIND, b"\x91" + bomb(100_000), rid=99)])
    frame = conn.recv_frame()
    assert frame is not None and frame.request_id == 99
    reply = m.decode_header(frame)
    assert isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"]
    env._session.detach()
    assert_serves_a_real_client(address)


def test_a_model_server_survives_a_nesting_bomb_and_a_custom_input_spec():
    """Defect 1 against a model endpoint, and defect 4: a model whose spec has a Custom
    input (host code, which cannot travel) used to kill the server at the first Hello."""
    from served_models import Lean

    import rlmesh.adapters as A
    from rlmesh.serve._model import ModelServer

    spec = A.ModelSpec(
        {"c": A.Custom(transform=lambda o: list(o))},
        A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0))),
    )
    model = Lean()
    model._spec = spec  # what Model(spec=...) stores
    server = ModelServer(model, "127.0.0.1:0").start()
    try:
        for header in (b"\x91" + bomb(1_100), b"\x91" + bomb(100_000)):
            sock = dial(server.address)
            conn = Connection(sock)
            sock.sendall(raw_frame(m.Ping.KIND, header))
            reply = read_reply(conn)
            assert isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"]
            sock.close()
        sock = dial(
            server.address
        )  # a real Hello: the Custom spec is published in a form that travels
        conn = Connection(sock)
        sock.sendall(frame_of(handshake.make_hello("client", None, service="model")))
        welcome = read_reply(conn)
        assert isinstance(welcome, m.Welcome)
        assert (
            welcome.contract["spec"] is None and "does not travel" in welcome.contract["spec_note"]
        )
        sock.close()
        assert ping(server.address).state == "ready"
    finally:
        server.shutdown()


class FakeServer:
    """A hostile env endpoint: a correct handshake, then ``answer(conn, request_frame)``."""

    def __init__(self, answer: Any) -> None:
        real = rlmesh.EnvServer(DelayEnv(), "127.0.0.1:0")
        self.contract = real.env_contract.to_dict()
        real.shutdown()
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.busy = threading.Event()  # the attack is still going on
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.listener.settimeout(30)
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.settimeout(30)
        conn = Connection(sock)
        try:
            frame = conn.recv_frame()
            assert frame is not None
            welcome = handshake.answer_hello(
                m.decode_header(frame),
                declared=None,
                service="env",
                component="fake",
                session_id="s",
                contract=self.contract,
            )
            sock.sendall(frame_of(welcome, frame.request_id))
            while not self.stop.is_set():
                frame = conn.recv_frame()
                if frame is None:
                    return
                self.answer(self, sock, frame)
        except (OSError, ConnectionError, ProtocolException):
            return
        finally:
            sock.close()

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(10)


@pytest.mark.parametrize("field", ["obs", "info", "completed final_info"])
def test_a_hostile_server_reply_raises_ProtocolException_and_closes_the_client(field):
    """Defect 1, the client's mirror bug: a nested reply used to raise RecursionError out of
    reset()/step() and leave the client open."""

    def answer(fake: FakeServer, sock: socket.socket, frame: Any) -> None:
        deep = bomb(100_000)
        if field == "obs":
            header = b"\x93\x91" + deep + b"\xc0\x00"  # ResetReply [obs, info, endpoint_ns]
        elif field == "info":
            header = b"\x93\x90" + deep + b"\x00"
        else:  # ResetReply with an extra trailing field holding an EpisodeRecord-like bomb
            header = (
                b"\x94\x90\xc0\x00\x91\x9a"
                + b"\xa1e\xc0\x00\x00\xcb"
                + bytes(8)
                + b"\xc2\xc2\x00\x00"
                + deep
            )
        sock.sendall(raw_frame(m.ResetReply.KIND, header, frame.request_id))

    fake = FakeServer(answer)
    try:
        env = rnp.RemoteEnv(fake.address, request_timeout_seconds=20)
        with pytest.raises(ProtocolException, match="nests deeper"):
            env.reset()
        with pytest.raises(ConnectionError):  # marked closed: nothing more is sent
            env.step(0)
    finally:
        fake.close()


def test_a_hostile_welcome_fails_the_connect_cleanly():
    """Defect 1 at the handshake: a nested Welcome is a ConnectionError, not a RecursionError."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run() -> None:
        listener.settimeout(30)
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        conn = Connection(sock)
        frame = conn.recv_frame()
        assert frame is not None
        sock.sendall(raw_frame(m.Welcome.KIND, b"\x91" + bomb(200_000), frame.request_id))
        time.sleep(0.5)
        sock.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        with pytest.raises(ConnectionError, match="nests deeper"):
            rnp.RemoteEnv(f"127.0.0.1:{port}", connect_timeout_seconds=20)
    finally:
        listener.close()
        t.join(10)


# -- defect 2: a peer that never reads ----------------------------------------------------


def test_a_peer_that_pipelines_pings_and_never_reads_cannot_freeze_the_active_session(serve):
    """Defect 2: the loop used to block in send for up to 10 s to a peer that never reads;
    the active client (here with an 8 s request timeout) would have timed out. Now the
    stranger's replies queue up to a bound, and a connection without a session is answered
    at most MAX_STRANGER_REPLIES requests, then dropped.

    The bound is a count: the loop reads at most 64 frames of the active session before it
    polls again and serves the stranger (at most 64 of its frames too), so the stranger is
    dropped within about MAX_STRANGER_REPLIES active steps, whatever the scheduling. (It
    used to be dropped only once the kernel's socket buffers filled, which takes from 100 KB
    to several MB of Pongs as the kernel sizes them, and the number of steps that took
    depended on how often the loop came round to the stranger.)"""
    server = serve(DelayEnv())
    addr = parse_connect_address(server.address)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=8) as env:
        env.reset(seed=0)
        stranger = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stranger.connect((addr.host, addr.port))
        stranger.setblocking(False)
        burst = frame_of(m.Ping()) * 4096  # ~100 KB of pipelined Pings, never a read
        dropped = False
        steps = 0
        for i in range(4 * MAX_STRANGER_REPLIES):  # bounded by a count (see the docstring)
            try:
                stranger.send(burst)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            env.step(i % 2)  # the active session is served throughout
            steps += 1
        stranger.close()
        assert dropped, "the server never dropped a peer that does not read"
        for i in range(5):
            env.step(i % 2)
    assert steps > 0


def test_a_connection_without_a_session_is_answered_a_bounded_number_of_requests(serve):
    """Counted in replies: a stranger that reads every Pong is still dropped after the bound,
    and a fresh probe is answered."""
    server = serve(DelayEnv())
    sock = dial(server.address)
    conn = Connection(sock)
    try:
        for _ in range(MAX_STRANGER_REPLIES):
            sock.sendall(frame_of(m.Ping()))
            assert isinstance(read_reply(conn), m.Pong)
        sock.sendall(frame_of(m.Ping()))
        assert closed_by_server(conn)
    finally:
        sock.close()
    assert ping(server.address).state == "ready"


# -- defect 3: timeouts around ring attach ---------------------------------------------------


def _needs_rings(env: Any) -> None:
    for i in range(6):
        env.step(i % 2)
    if env._session.conn.shm is None:
        pytest.skip(
            "this host does not use shared-memory rings (single CPU, not x86-64 Linux, or RLMESH_SHM=0)"
        )


def _retry(call: Any) -> Any:
    for _ in range(40):  # bounded: the server finishes its sleep within a few tries
        try:
            return call()
        except TimeoutError:
            continue
    raise AssertionError("the client never recovered after a timeout")


def test_a_timeout_on_an_early_request_leaves_the_ring_session_usable(serve_process):
    """Defect 3: a timeout on one of the first requests used to break the session at attach."""
    _proc, address = serve_process("hardening_envs:make_delay_env")
    env = rnp.RemoteEnv(address, request_timeout_seconds=0.5)
    env.reset(seed=0)
    with pytest.raises(TimeoutError):
        env.reset(options={"sleep": 1.5})  # the server is busy past the timeout
    _retry(env.reset)
    for i in range(20):
        env.step(i % 2)
    _needs_rings(env)
    env.close()


def test_a_timeout_of_the_attach_itself_leaves_the_client_usable(serve_process):
    """Defect 3: the Attach request times out (the server is still in a slow env call);
    the next request first collects the AttachReply, then goes through the agreed path."""
    _proc, address = serve_process("hardening_envs:make_delay_env")
    env = rnp.RemoteEnv(address, request_timeout_seconds=0.5)
    session = env._session
    if not session.conn.polling or session._attach_after < 0:
        pytest.skip("this host does not use shared-memory rings")
    env.reset(seed=0)
    with pytest.raises(TimeoutError):
        env.reset(options={"sleep": 5.0})
    session._timed_out = False  # attach now, while the server is still busy (what used to break it)
    with pytest.raises(TimeoutError):
        env.reset()
    assert session._pending_attach is not None
    _retry(env.reset)
    assert session._pending_attach is None
    for i in range(10):
        env.step(i % 2)
    assert session.conn.shm is not None
    env.close()


# -- defect 5: a whole-request deadline -------------------------------------------------------


def test_a_trickled_reply_cannot_stretch_the_request_timeout():
    """Defect 5: the timeout used to restart on every byte (51 s under a 1 s timeout)."""

    def answer(fake: FakeServer, sock: socket.socket, frame: Any) -> None:
        reply = frame_of(m.ResetReply(obs=[], info={"pad": "x" * 200}), frame.request_id)
        fake.busy.set()
        for b in reply:  # one byte every 0.1 s: ~25 s for the whole reply
            if fake.stop.is_set():
                break
            sock.sendall(bytes([b]))
            time.sleep(0.1)
        fake.busy.clear()

    fake = FakeServer(answer)
    try:
        env = rnp.RemoteEnv(fake.address, request_timeout_seconds=1.0)
        with pytest.raises(RequestTimeout):
            env.reset()
        assert fake.busy.is_set(), "the client waited for the whole trickled reply"
    finally:
        fake.close()


def test_an_endless_stream_of_stale_replies_cannot_stretch_the_request_timeout():
    """Defect 5: stale replies (older request ids) used to keep a request waiting (13 s)."""

    def answer(fake: FakeServer, sock: socket.socket, frame: Any) -> None:
        stale = frame_of(m.Pong(state="ready"), (frame.request_id + 1000) & 0xFFFFFFFF)
        fake.busy.set()
        for _ in range(600):  # 30 s of stale replies at most
            if fake.stop.is_set():
                break
            sock.sendall(stale)
            time.sleep(0.05)
        fake.busy.clear()

    fake = FakeServer(answer)
    try:
        env = rnp.RemoteEnv(fake.address, request_timeout_seconds=1.0)
        with pytest.raises(RequestTimeout):
            env.reset()
        assert fake.busy.is_set(), "the client waited until the stale replies stopped"
    finally:
        fake.close()


# -- defect 6: shutdown with a hung env --------------------------------------------------------


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_shutdown_with_a_hung_env_closes_the_listener_and_removes_the_socket(short_tmp, transport):
    """Defect 6: after shutdown() returns the endpoint refuses connections, env still stuck."""
    env = BlockingEnv()
    address = f"unix://{short_tmp}/hung.sock" if transport == "unix" else "127.0.0.1:0"
    server = rlmesh.EnvServer(
        env, address, options=ServeOptions(drain_timeout_seconds=0.2, close_timeout_seconds=0.2)
    ).start()
    client = rnp.RemoteEnv(server.address, request_timeout_seconds=30)
    client.reset()
    errors: list[BaseException] = []

    def stuck_step() -> None:
        try:
            client.step(1)
        except BaseException as exc:  # the session ends once the env returns
            errors.append(exc)

    t = threading.Thread(target=stuck_step, daemon=True)
    t.start()
    try:
        assert env.entered.wait(20)
        server.shutdown()  # returns after its budget although the env is stuck
        assert not env.finished.is_set()
        addr = parse_connect_address(server.address)
        if transport == "unix":
            assert not os.path.exists(addr.path)
            with pytest.raises(OSError):
                dial(server.address)
        else:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((addr.host, addr.port), timeout=5)
    finally:
        env.release.set()
        t.join(20)
        client.detach() if hasattr(client, "detach") else client.close()
    assert server.wait(20)


# -- defect 7: ring attach across users ----------------------------------------------------------

_ATTACKER = r"""
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=20)
def frame():
    head = b""
    while len(head) < 24:
        head += s.recv(24 - len(head))
    body_len = struct.unpack_from("<Q", head, 16)[0]
    body = b""
    while len(body) < body_len:
        body += s.recv(body_len - len(body))
    return head + body
s.sendall(bytes.fromhex(sys.stdin.readline()))
print(frame().hex(), flush=True)              # the Welcome (with this session's shm token)
s.sendall(bytes.fromhex(sys.stdin.readline()))
print(frame().hex(), flush=True)              # the AttachReply
"""


def _attacker_python() -> str:
    """A stdlib-only interpreter another uid can run (a venv under /root may not be readable)."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _as_uid(uid: int | None) -> Any:
    def drop() -> None:
        if uid is not None:
            os.setgid(uid)
            os.setuid(uid)

    return drop


def _attach_as(uid: int | None, address: str, victim_token_from_welcome: bool) -> tuple[bool, str]:
    """Run the attacker as ``uid``; the victim ring file is root's, carrying the attacker's
    own session token (the worst case: only the owner check stands between them)."""
    addr = parse_connect_address(address)
    proc = subprocess.Popen(
        [_attacker_python(), "-I", "-c", _ATTACKER, addr.host, str(addr.port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        preexec_fn=_as_uid(uid),
    )
    path = ""
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(frame_of(handshake.make_hello("attacker", None), 1).hex() + "\n")
        proc.stdin.flush()
        welcome_hex = proc.stdout.readline().strip()
        assert welcome_hex, proc.stderr.read() if proc.stderr else ""
        body = bytes.fromhex(welcome_hex)
        from rlmesh.wire.frames import decode_prefix, split_body

        plan = decode_prefix(body[:24])
        welcome = m.decode_header(split_body(plan, np.frombuffer(body[24:], np.uint8)))
        token = welcome.capabilities.get("shm.token", "")
        path, ring = shm.create(
            token=token if victim_token_from_welcome else "not-the-token"
        )  # root's file
        ring.close()
        proc.stdin.write(frame_of(m.Attach(path=path), 2).hex() + "\n")
        proc.stdin.flush()
        reply_hex = proc.stdout.readline().strip()
        body = bytes.fromhex(reply_hex)
        reply = m.decode_header(
            split_body(decode_prefix(body[:24]), np.frombuffer(body[24:], np.uint8))
        )
        return bool(reply.attached), path
    finally:
        stop_process(proc)


def test_a_process_of_another_uid_cannot_make_the_server_map_a_ring_file(serve_process):
    """Defect 7: the server maps only a file owned by the connecting peer's uid (looked up
    for loopback TCP in /proc/net/tcp) that carries this session's secret."""
    if os.getuid() != 0:
        pytest.skip("dropping to another uid needs root")
    if not shm.shm_supported():
        pytest.skip("shared-memory rings are not used on this host")
    probe = subprocess.run(
        [_attacker_python(), "-I", "-c", "pass"],
        cwd="/",
        capture_output=True,
        preexec_fn=_as_uid(65534),
    )
    if probe.returncode != 0:
        pytest.skip(
            f"no Python interpreter this test can run as uid 65534 ({probe.stderr[-200:]!r})"
        )
    _proc, address = serve_process("hardening_envs:make_delay_env")
    # control: the same attacker as root (the file's owner) with the session's secret is accepted
    attached, path = _attach_as(None, address, victim_token_from_welcome=True)
    if not attached:
        pytest.skip("the server does not busy-poll here (single CPU?), so it declines every ring")
    # a same-uid process naming a file without this session's secret is declined
    attached, path = _attach_as(None, address, victim_token_from_welcome=False)
    assert not attached and os.path.exists(path)  # declined, and the file is left alone
    os.unlink(path)
    # another uid naming root's file is declined, even with the right secret; the file stays
    attached, path = _attach_as(65534, address, victim_token_from_welcome=True)
    assert not attached and os.path.exists(path)
    os.unlink(path)
    assert_serves_a_real_client(address)


# -- defect 8: the ready file ---------------------------------------------------------------------


def test_the_ready_file_never_follows_a_symlink(short_tmp):
    """Defect 8: a symlink planted at the ready-file name (or at the old predictable temp
    name) is never written through; the ready file is replaced atomically."""
    from rlmesh._cli._serving import write_ready_file as _write_ready_file

    victim = short_tmp / "victim"
    victim.write_text("precious\n")
    ready = short_tmp / "ready"
    ready.symlink_to(victim)
    for pid in range(os.getpid(), os.getpid() + 50):  # the old temp names
        (short_tmp / f"ready.tmp.{pid}").symlink_to(victim)
    _write_ready_file(str(ready), "tcp://127.0.0.1:1234")
    assert victim.read_text() == "precious\n"
    assert not ready.is_symlink() and ready.read_text() == "tcp://127.0.0.1:1234\n"
    assert [p.name for p in short_tmp.iterdir() if p.name.endswith(".tmp")] == []


def test_the_cli_writes_the_ready_file_through_a_planted_symlink_safely(short_tmp):
    victim = short_tmp / "victim"
    victim.write_text("precious\n")
    ready = short_tmp / "ready"
    ready.symlink_to(victim)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            "CartPole-v1",
            "--address",
            f"unix://{short_tmp}/s.sock",
            "--ready-file",
            str(ready),
        ],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # bounded wait for the announcement
            if ready.exists() and not ready.is_symlink():
                break
            time.sleep(0.1)
        assert ready.read_text().startswith("unix://")
        assert victim.read_text() == "precious\n"
    finally:
        stop_process(proc)


# -- defect 9: oversized observations ---------------------------------------------------------------


class _HugeObsEnv(gym.Env):  # type: ignore[type-arg]
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (2048, 1024), np.uint8)  # 2 MiB
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros((2048, 1024), np.uint8), {}

    def step(self, action: Any) -> Any:
        return np.zeros((2048, 1024), np.uint8), 0.0, False, False, {}


def test_an_observation_over_max_frame_bytes_is_refused_before_sending(serve, monkeypatch):
    """Defect 9: the server names the size, the limit and the knob, and ends the session."""
    monkeypatch.setenv("RLMESH_MAX_FRAME_BYTES", str(1024 * 1024))
    server = serve(_HugeObsEnv())
    env = rnp.RemoteEnv(server.address, request_timeout_seconds=20)
    with pytest.raises(rlmesh.EnvironmentException) as info:
        env.reset()
    text = str(info.value)
    import re

    size = re.search(r"the observation is (\d+) bytes", text)
    assert "[INTERNAL] reset failed" in text and size and int(size.group(1)) >= 2048 * 1024
    assert "limit of 1048576 bytes" in text
    assert "RLMESH_MAX_FRAME_BYTES" in text and not info.value.recoverable
    with pytest.raises(ConnectionError):
        env.reset()
    monkeypatch.delenv("RLMESH_MAX_FRAME_BYTES")
    assert ping(server.address).state == "ready"


# -- defect 10: deep spaces --------------------------------------------------------------------------


def test_a_space_nested_too_deep_is_refused_with_a_clear_ValueError():
    space: Any = gym.spaces.Discrete(2)
    for _ in range(200):
        space = gym.spaces.Dict({"a": space})

    class Deep(gym.Env):  # type: ignore[type-arg]
        observation_space = space
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match="at most 32 levels"):
        rlmesh.EnvServer(Deep())


def test_a_space_at_the_depth_limit_round_trips(serve):
    space: Any = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    for _ in range(32):
        space = gym.spaces.Tuple((space,))

    class Deep(gym.Env):  # type: ignore[type-arg]
        observation_space = space
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return self.observation_space.sample(), {}

        def step(self, action: Any) -> Any:
            return self.observation_space.sample(), 0.0, False, False, {}

    server = serve(Deep())
    with rnp.RemoteEnv(server.address) as env:
        obs, _ = env.reset()
        for _ in range(32):
            obs = obs[0]
        assert obs.shape == (2,)


# -- session semantics: step before reset -------------------------------------------------------------


@pytest.mark.parametrize("request_msg", [m.Step(action=[1]), m.Render()])
def test_a_step_or_render_before_the_sessions_first_reset_is_refused_and_recoverable(
    serve, request_msg
):
    """A new session never inherits the previous client's episode; the env is not called."""
    env = DelayEnv()
    server = serve(env)
    with rnp.RemoteEnv(server.address) as first:  # the previous client leaves mid-episode
        first.reset()
        first.step(0)
    calls = list(env.calls)
    sock = dial(server.address)
    conn, _ = hello(sock)
    sock.sendall(frame_of(request_msg, 2))
    reply = read_reply(conn)
    assert (
        isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["NOT_READY"] and reply.recoverable
    )
    assert "before reset" in reply.message
    assert env.calls == calls  # the env was not called
    sock.sendall(frame_of(m.Reset(), 3))  # the session lives on
    assert isinstance(read_reply(conn), m.ResetReply)
    sock.sendall(frame_of(m.Step(action=[1]), 4))
    assert isinstance(read_reply(conn), m.StepReply)
    sock.close()


# -- safe defaults and graceful ends --------------------------------------------------------------------


def test_the_cli_binds_loopback_by_default_and_RLMESH_ADDRESS_still_wins(monkeypatch):
    from rlmesh._cli.serve import build_parser

    monkeypatch.delenv("RLMESH_ADDRESS", raising=False)
    monkeypatch.delenv("RLMESH_PORT", raising=False)
    assert build_parser().parse_args(["CartPole-v1"]).address == "127.0.0.1:50051"
    monkeypatch.setenv("RLMESH_ADDRESS", "0.0.0.0:50051")
    assert build_parser().parse_args(["CartPole-v1"]).address == "0.0.0.0:50051"


@pytest.mark.parametrize("bind,warned", [("0.0.0.0:0", True), ("127.0.0.1:0", False)])
def test_the_startup_line_says_when_the_endpoint_has_no_authentication(bind, warned):
    cmd = [sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1", "--address", bind]
    if warned:  # beyond loopback without a token needs the explicit opt-out (issue 36) ...
        cmd += ["--insecure-no-auth"]
        cmd = in_loopback_namespace(
            cmd
        )  # ... and binds 0.0.0.0 only where nothing else is reachable
    line = startup_line(cmd)
    assert line.startswith("RLMesh serving env on")
    assert ("no authentication" in line) is warned


def test_sigterm_stops_the_cli_server_gracefully(short_tmp):
    """SIGTERM (Docker, systemd, Kubernetes) drains, closes the env, removes the unix socket
    file and exits 0 with one "stopped" line."""
    sock_path = short_tmp / "t.sock"
    marker = short_tmp / "closed"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            "integration_envs:make_marker",
            "--param",
            f"path={marker}",
            "--address",
            f"unix://{sock_path}",
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rlmesh.serve.wait_ready(f"unix://{sock_path}", timeout_seconds=60)
        with rnp.RemoteEnv(f"unix://{sock_path}") as env:
            env.reset()
            env.step(0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out.strip().splitlines()[-1] == "RLMesh server stopped (terminated)"
        assert "Traceback" not in err
        assert not sock_path.exists()
        assert marker.read_text().count("closed") >= 1
    finally:
        stop_process(proc)


def test_serve_returns_on_ctrl_c_without_a_traceback(short_tmp):
    script = (
        "import gymnasium as gym, rlmesh\n"
        f"server = rlmesh.EnvServer(gym.make('CartPole-v1'), 'unix://{short_tmp}/c.sock')\n"
        "server.serve()\n"
        "print('returned', server.stop_reason, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rlmesh.serve.wait_ready(f"unix://{short_tmp}/c.sock", timeout_seconds=60)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "returned interrupted" in out
        assert "Traceback" not in err
        assert not Path(f"{short_tmp}/c.sock").exists()
    finally:
        stop_process(proc)


def test_a_client_stepping_before_reset_gets_ResetNeeded_and_keeps_its_session(serve):
    """The refusal reaches Python code as :class:`rlmesh.errors.ResetNeeded` (recoverable, NOT_READY)."""
    from rlmesh.errors import EnvironmentException, ResetNeeded

    server = serve(DelayEnv())
    with rnp.RemoteEnv(server.address) as env:
        with pytest.raises(ResetNeeded) as info:
            env.step(0)
        assert isinstance(info.value, EnvironmentException) and info.value.recoverable
        assert info.value.code == "NOT_READY" and "reset" in str(info.value)
        env.reset()
        env.step(0)  # the session lives on
