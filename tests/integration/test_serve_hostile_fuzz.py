"""A structured fuzz of the serve loop (issue 18 "Done when"; DESIGN "every byte from a peer is hostile").

Unlike ``test_serve_fuzz.py`` (mutated bytes), this builds *well-framed* requests whose
msgpack headers are hostile in a structured way, one field at a time: deep nesting (up
to thousands of levels, arrays and maps), huge declared lengths (array32/map32/str32/
bin32/ext32 claiming gigabytes), and wrong types in every field of every request kind,
before and after the handshake. The server runs in a child process; after every batch a
real client must still be served, and the process must still be alive.
"""

from __future__ import annotations

import random
import socket
import struct
from typing import Any

import msgspec
import pytest

import rlmesh.numpy as rnp
from conftest import stop_process
from rlmesh.serve import ping
from rlmesh.transport import Connection
from rlmesh.transport.address import parse_connect_address
from rlmesh.wire import handshake, messages as m
from rlmesh.wire.frames import MAGIC, PREFIX, VERSION

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CASES = 240
BATCH = 40

_VALID: dict[int, Any] = {
    m.Hello.KIND: handshake.make_hello("fuzz", None),
    m.Reset.KIND: m.Reset(
        seeds=[1], options={"a": 1}, episode_ids=["e"], env_indices=[], timeout_ms=0
    ),
    m.Step.KIND: m.Step(action=[1], episode_ids={0: "e"}, timeout_ms=0, has_action=True),
    m.Render.KIND: m.Render(env_index=0, timeout_ms=0),
    m.Close.KIND: m.Close(reason="r"),
    m.Shutdown.KIND: m.Shutdown(reason="r"),
    m.Ping.KIND: m.Ping(),
    m.Configure.KIND: m.Configure(edition="2026.06"),
    m.Attach.KIND: m.Attach(path="/dev/shm/rlmesh-1-x"),
}
_BEFORE_HELLO = {m.Hello.KIND, m.Ping.KIND, m.Shutdown.KIND}


def hostile_value(rng: random.Random) -> bytes:
    """One msgpack value, hostile in one of three ways (or just of a wrong type)."""
    way = rng.randrange(4)
    if way == 0:  # deep nesting
        depth = rng.choice([129, 500, 1_100, rng.randrange(100, 20_000)])
        opener = rng.choice([b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\xde\x00\x01\xa1k"])
        return opener * depth + b"\xc0"
    if way == 1:  # a huge declared length, then far fewer bytes
        marker = rng.choice([b"\xdd", b"\xdf", b"\xdb", b"\xc6", b"\xc9"])
        extra = b"\x01" if marker == b"\xc9" else b""
        return (
            marker
            + struct.pack(">I", rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 1 << 30]))
            + extra
            + b"\x00" * rng.randrange(8)
        )
    if way == 2:  # extension payloads: unknown types, bad ndarray headers
        code = rng.choice([1, 1, 7, 127, -1 & 0xFF])
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 24)))
        return b"\xc7" + bytes([len(body), code]) + body
    value = rng.choice(
        [
            -1,
            2**64 - 1,
            -(2**63),
            1.5,
            float("nan"),
            "",
            "x" * 300,
            b"\x00\xff",
            None,
            True,
            [1, "a", None],
            {"k": [1]},
            [[[]]],
        ]
    )
    raw = msgspec.msgpack.encode(value)
    return rng.choice([raw, b"\x81\x01\x02"])  # or a map with an int key


def hostile_header(kind: int, rng: random.Random) -> bytes:
    """The valid header of ``kind`` with one field (or one extra trailing field) replaced."""
    fields = list(msgspec.msgpack.decode(m._ENCODER.encode(_VALID[kind])))
    parts = [msgspec.msgpack.encode(f) for f in fields]
    i = rng.randrange(len(parts) + 1)
    if i == len(parts):
        parts.append(hostile_value(rng))  # a field "from a later edition"
    else:
        parts[i] = hostile_value(rng)
    n = len(parts)
    head = bytes([0x90 + n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
    return head + b"".join(parts)


def raw_frame(kind: int, header: bytes, rid: int) -> bytes:
    return PREFIX.pack(MAGIC, VERSION, kind, rid, len(header), 0, len(header)) + header


def attack(address: str, kind: int, header: bytes) -> None:
    addr = parse_connect_address(address)
    sock = socket.create_connection((addr.host, addr.port), timeout=10)
    try:
        conn = Connection(sock)
        if kind not in _BEFORE_HELLO:
            sock.sendall(
                b"".join(bytes(b) for b in m.encode_message(handshake.make_hello("fuzz", None), 1))
            )
            welcome = conn.recv_frame()
            assert welcome is not None and welcome.kind == m.Welcome.KIND
        sock.sendall(raw_frame(kind, header, 2))
        frame = conn.recv_frame()  # a reply (an Error for hostile bytes), or the server hangs up
        assert frame is not None
    except (ConnectionError, OSError):
        pass
    finally:
        sock.close()


def test_structured_hostile_headers_never_stop_the_serve_loop(serve_process):
    proc, address = serve_process("hardening_envs:make_delay_env")
    rng = random.Random(18)
    kinds = sorted(_VALID)
    for start in range(0, CASES, BATCH):
        for _ in range(BATCH):
            kind = rng.choice(kinds)
            attack(address, kind, hostile_header(kind, rng))
        assert proc.poll() is None, f"the server exited during cases {start}..{start + BATCH}"
        assert ping(address).state == "ready"
        with rnp.RemoteEnv(address, request_timeout_seconds=20) as env:  # a real client is served
            env.reset(seed=start)
            for i in range(3):
                env.step(i % 2)
    stop_process(proc)
    assert proc.returncode in (0, 130)
