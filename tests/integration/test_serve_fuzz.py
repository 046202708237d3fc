"""A live server survives hundreds of malformed client sessions, with flat memory.

DESIGN: "Bad bytes from a peer never crash a server or leak memory"; STYLE "Fuzz for
an invariant": arbitrary bytes into a live server give a typed error or a closed
connection, the server keeps serving, and memory stays flat.

The server runs in a child process (``rlmesh serve``) so its resident set
and open descriptors can be read from ``/proc/<pid>``. Valid frames are built from the
endpoint's own contract (learned through a real handshake), then mutated: random bytes,
prefixes announcing huge lengths, valid ``Hello`` then garbage, truncated frames,
bit flips, mismatched segments and scalars, out-of-range indices and ids. Each fuzz
session sends its bytes, half-closes (or drops mid-frame), and reads until the server
closes, so one session is fully handled before the next begins. Every loop is bounded
in count and in time.
"""

from __future__ import annotations

import random
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh.numpy as rnp
import rlmesh.spaces as rs
from rlmesh.spaces._values import compile_encoder
from rlmesh.transport import parse_connect_address
from rlmesh.wire import handshake, messages as m
from rlmesh.wire.frames import MAGIC, PREFIX, VERSION
from rlmesh.wire.values import ValueCodec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>"),
]

SESSIONS = 600
WARMUP_SESSIONS = 60
TIME_BUDGET_SECONDS = 90.0  # a generous cap on the whole fuzz loop on a slow, shared machine
SESSION_GUARD_SECONDS = 5.0  # per-session read guard; a healthy server answers in microseconds
RSS_GROWTH_LIMIT_BYTES = 20 * 1024 * 1024

ENDPOINTS = {
    "scalar-dict": ("integration_envs:make_fuzz_env", ()),
    "lanes-dict": ("integration_envs:make_fuzz_env", ("--num-envs", "3")),
    "gym-vector": ("CartPole-v1", ("--num-envs", "2", "--vectorization-mode", "sync")),
}


def frame_bytes(msg: object, rid: int = 1, segments: list[Any] | tuple[Any, ...] = ()) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in m.encode_message(msg, rid, segments))


def flip_bits(data: bytes, rng: random.Random, count: int) -> bytes:
    out = bytearray(data)
    for _ in range(count):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def any_int(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 2, 3, 7, 2**31, -(2**63), 2**63 - 1, rng.randrange(-1000, 1000)])


class Fuzzer:
    """Builds valid and mutated frames for one endpoint contract."""

    def __init__(self, contract: Any) -> None:
        self.n = contract.num_envs
        self.lanes = self.n if self.n > 1 else None
        spec = contract.action_space
        self.sampler = rs.space_from_spec(spec, bridge="numpy")
        self.sampler.seed(0)
        self.encode = compile_encoder(spec, lanes=self.lanes)
        self.codec = ValueCodec(spec, self.lanes)
        self.mutators: list[Callable[[random.Random], bytes]] = [
            self.random_bytes,
            self.random_after_magic,
            self.inflated_prefix,
            self.hello_then_garbage,
            self.hello_then_inflated,
            self.truncated_hello,
            self.truncated_step,
            self.flipped_hello,
            self.flipped_session,
            self.valid_session_abandoned,
            self.requests_before_hello,
            self.wrong_segments,
            self.wrong_scalars,
            self.odd_requests,
        ]

    # -- valid frames --------------------------------------------------------------------------

    def hello(self) -> bytes:
        return frame_bytes(handshake.make_hello("rlmesh-env", None), 1)

    def action(self) -> tuple[list[Any], list[Any]]:
        value = (
            self.sampler.sample()
            if self.lanes is None
            else [self.sampler.sample() for _ in range(self.n)]
        )
        return self.codec.split(self.encode(value))

    def step_frame(self, rid: int) -> bytes:
        scalars, segments = self.action()
        return frame_bytes(m.Step(action=scalars), rid, segments)

    def reset_frame(self, rid: int) -> bytes:
        return frame_bytes(
            m.Reset(
                seeds=[rid + i for i in range(self.n)],
                episode_ids=[f"ep-{rid}-{i}" for i in range(self.n)],
            ),
            rid,
        )

    # -- mutators --------------------------------------------------------------------------------

    def random_bytes(self, rng: random.Random) -> bytes:
        return rng.randbytes(rng.randrange(0, 3000))

    def random_after_magic(self, rng: random.Random) -> bytes:
        return MAGIC + bytes([VERSION]) + rng.randbytes(rng.randrange(0, 200))

    def _inflated(self, rng: random.Random) -> bytes:
        kind = rng.choice([m.Hello.KIND, m.Step.KIND, m.Reset.KIND, 0x7E, 0xFF])
        hlen = rng.choice([0, 1, 2**16, 2**31, 2**32 - 1])
        count = rng.choice([0, 1, 5000, 2**32 - 1])
        body = rng.choice([0, 2**20 + 1, 200 * 2**20, 2**40, 2**64 - 1])
        return PREFIX.pack(MAGIC, VERSION, kind, rng.randrange(2**32), hlen, count, body)

    def inflated_prefix(self, rng: random.Random) -> bytes:
        return self._inflated(rng) + rng.randbytes(rng.randrange(0, 64))

    def hello_then_garbage(self, rng: random.Random) -> bytes:
        return self.hello() + rng.randbytes(rng.randrange(1, 500))

    def hello_then_inflated(self, rng: random.Random) -> bytes:
        # after Hello the session limits admit large bodies: the server must not hold on to them
        return self.hello() + self._inflated(rng) + rng.randbytes(rng.randrange(0, 4096))

    def truncated_hello(self, rng: random.Random) -> bytes:
        data = self.hello()
        return data[: rng.randrange(1, len(data))]

    def truncated_step(self, rng: random.Random) -> bytes:
        data = self.step_frame(3)
        return self.hello() + self.reset_frame(2) + data[: rng.randrange(1, len(data))]

    def flipped_hello(self, rng: random.Random) -> bytes:
        return flip_bits(self.hello(), rng, rng.randrange(1, 6))

    def flipped_session(self, rng: random.Random) -> bytes:
        body = (
            self.reset_frame(2)
            + self.step_frame(3)
            + self.step_frame(4)
            + frame_bytes(m.Render(), 5)
        )
        return self.hello() + flip_bits(body, rng, rng.randrange(1, 9))

    def valid_session_abandoned(self, rng: random.Random) -> bytes:
        steps = b"".join(self.step_frame(3 + i) for i in range(rng.randrange(1, 5)))
        return self.hello() + self.reset_frame(2) + steps

    def requests_before_hello(self, rng: random.Random) -> bytes:
        return self.reset_frame(1) + self.step_frame(2)

    def wrong_segments(self, rng: random.Random) -> bytes:
        scalars, segments = self.action()
        segments = list(segments)
        if segments and rng.random() < 0.7:
            segments[rng.randrange(len(segments))] = np.zeros(rng.randrange(0, 300), np.uint8)
        else:
            segments.append(np.ones(rng.randrange(1, 64), np.uint8))
        return self.hello() + self.reset_frame(2) + frame_bytes(m.Step(action=scalars), 3, segments)

    def wrong_scalars(self, rng: random.Random) -> bytes:
        _, segments = self.action()
        bad = rng.choice([[], ["x", 1], [2**62, "t", 3], [None, None], [1.5, b"x"], [["a"] * 5, 1]])
        return self.hello() + self.reset_frame(2) + frame_bytes(m.Step(action=bad), 3, segments)

    def odd_requests(self, rng: random.Random) -> bytes:
        """Schema-valid requests with out-of-range indices, counts, ids and options."""
        out = [self.hello()]
        for rid in range(2, 2 + rng.randrange(1, 6)):
            choice = rng.randrange(6)
            if choice == 0:
                k = rng.randrange(0, 5)
                out.append(
                    frame_bytes(
                        m.Reset(
                            seeds=[
                                rng.choice([None, any_int(rng)]) for _ in range(rng.randrange(0, 5))
                            ],
                            episode_ids=[
                                "x" * rng.randrange(0, 40) for _ in range(rng.randrange(0, 5))
                            ],
                            env_indices=[any_int(rng) for _ in range(k)],
                            options=rng.choice(
                                [None, {"a": [1, {"b": None}]}, {"reset_mask": [True]}]
                            ),
                            timeout_ms=rng.choice([0, 1, 2**40]),
                        ),
                        rid,
                    )
                )
            elif choice == 1:
                scalars, segments = self.action()
                ids = {any_int(rng) % 2**32: "id" for _ in range(rng.randrange(0, 4))}
                out.append(
                    frame_bytes(
                        m.Step(action=scalars, episode_ids=ids, has_action=rng.random() < 0.8),
                        rid,
                        segments,
                    )
                )
            elif choice == 2:
                out.append(
                    frame_bytes(
                        m.Render(env_index=any_int(rng), timeout_ms=rng.choice([0, 5])), rid
                    )
                )
            elif choice == 3:
                out.append(
                    frame_bytes(
                        m.Configure(edition=rng.choice(["", "2026.06", "1999.01", "x" * 300])), rid
                    )
                )
            elif choice == 4:
                out.append(
                    frame_bytes(m.Shutdown(reason=rng.choice(["", "fuzz", "\u2603" * 50])), rid)
                )
            else:
                out.append(frame_bytes(m.Ping(), rid))
        if rng.random() < 0.3:
            out.append(frame_bytes(m.Close(reason="fuzz"), 99))
        return b"".join(out)


def connect(address: str) -> socket.socket:
    addr = parse_connect_address(address)
    if addr.transport == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(SESSION_GUARD_SECONDS)
        sock.connect(addr.path)
        return sock
    return socket.create_connection((addr.host, addr.port), timeout=SESSION_GUARD_SECONDS)


def fuzz_session(address: str, data: bytes, rng: random.Random) -> bool:
    """Send ``data``, half-close (or just drop), read until the server closes; False on the guard."""
    with connect(address) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return True  # the server already closed on a bad prefix: fine
        if rng.random() < 0.2:
            return True  # mid-frame disconnect: drop without half-closing or reading
        try:
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + SESSION_GUARD_SECONDS
            while time.monotonic() < deadline:
                if not sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except OSError:
            return True  # reset by the server
    return False


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def connect_client(address: str, vector: bool) -> Any:
    """Dial a well-behaved client, waiting (bounded) for the previous session to be released."""
    cls = rnp.RemoteVectorEnv if vector else rnp.RemoteEnv
    deadline = time.monotonic() + 10
    while True:
        try:
            return cls(address, connect_timeout_seconds=5, request_timeout_seconds=10)
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def correct_session(address: str, vector: bool = False) -> Any:
    """A well-behaved client must still be served exactly; returns the contract."""
    with connect_client(address, vector) as client:
        obs, info = client.reset(seed=3)
        assert len(info["episode_ids"]) == client.env_contract.num_envs
        n = client.env_contract.num_envs
        actions = (
            client.action_space.sample()
            if not vector
            else [client.action_space.sample() for _ in range(n)]
        )
        result, reward, terminated, truncated, _ = client.step(actions)
        if client.env_contract.id == "UnknownEnv-v1":  # the echo env: the observation is the action
            for i in range(n):
                sent = actions if not vector else actions[i]
                got = result if not vector else {k: v[i] for k, v in result.items()}
                np.testing.assert_array_equal(got["img"], sent["img"])
                np.testing.assert_array_equal(got["v"], sent["v"])
                assert (int(got["d"]), got["t"]) == (sent["d"], sent["t"])
        else:
            assert np.asarray(result).shape == (n, 4)
        return client.env_contract


def run_fuzz(
    address: str, fuzzer: Fuzzer, alive: Callable[[], bool], count: int, seed: int, budget: float
) -> tuple[int, int]:
    rng = random.Random(seed)
    started = time.monotonic()
    done = stuck = 0
    for i in range(count):
        if time.monotonic() - started > budget:
            break
        mutator = fuzzer.mutators[i % len(fuzzer.mutators)]
        if not fuzz_session(address, mutator(rng), rng):
            stuck += 1
        done += 1
        if i % 25 == 0:
            assert alive(), f"the server died during fuzz session {i} ({mutator.__name__})"
    return done, stuck


@pytest.mark.parametrize(
    ("endpoint", "transport"),
    [("scalar-dict", "tcp"), ("scalar-dict", "unix"), ("lanes-dict", "tcp"), ("gym-vector", "tcp")],
)
def test_a_live_server_survives_hundreds_of_malformed_sessions_with_flat_memory(
    serve_process, endpoint, transport
):
    target, args = ENDPOINTS[endpoint]
    proc, address = serve_process(target, *args, transport=transport)
    vector = endpoint != "scalar-dict"

    def alive() -> bool:
        return proc.poll() is None

    fuzzer = Fuzzer(correct_session(address, vector))
    run_fuzz(address, fuzzer, alive, WARMUP_SESSIONS, seed=1, budget=TIME_BUDGET_SECONDS / 3)
    correct_session(address, vector)
    before, fds_before = rss_bytes(proc.pid), open_fds(proc.pid)

    done, stuck = run_fuzz(address, fuzzer, alive, SESSIONS, seed=2, budget=TIME_BUDGET_SECONDS)

    assert alive(), "the server process died"
    correct_session(address, vector)  # still serves a correct client, exactly
    growth = rss_bytes(proc.pid) - before
    assert done >= len(fuzzer.mutators), "the fuzz loop ran at least one session per mutator"
    assert stuck == 0, f"{stuck} sessions were neither answered nor closed by the server"
    assert growth < RSS_GROWTH_LIMIT_BYTES, (
        f"server RSS grew by {growth / 2**20:.1f} MiB over {done} sessions"
    )
    assert open_fds(proc.pid) <= fds_before + 2, "the server leaks sockets"


def test_bad_sessions_get_a_typed_error_frame_or_a_closed_connection(serve):
    """The invariant on single cases: a PROTOCOL ``Error`` frame (or EOF), and the server lives."""
    from integration_envs import make_fuzz_env

    server = serve(make_fuzz_env())
    fuzzer = Fuzzer(server.env_contract)
    cases = {
        "not rlmesh": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "huge body before hello": PREFIX.pack(MAGIC, VERSION, m.Hello.KIND, 1, 10, 0, 2**40),
        "reset before hello": fuzzer.reset_frame(1),
        "unknown kind": PREFIX.pack(MAGIC, VERSION, 0x7E, 1, 0, 0, 0),
    }
    for name, data in cases.items():
        with connect(server.address) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        if received:
            head = PREFIX.unpack(received[: PREFIX.size])
            assert head[0] == MAGIC and head[2] == m.Error.KIND, name
            header_len = head[4]
            err = m._DECODERS[m.Error.KIND].decode(received[PREFIX.size : PREFIX.size + header_len])
            assert err.code == 14 and err.recoverable is False, (
                name
            )  # PROTOCOL (errors.CODE_NUMBERS)
    correct_session(server.address)


def test_a_flood_of_silent_connections_does_not_lock_out_a_real_client(serve):
    """More idle, never-speaking connections than the pending limit: the newest client still gets in."""
    from integration_envs import make_fuzz_env

    server = serve(make_fuzz_env())
    silent = [connect(server.address) for _ in range(100)]
    try:
        correct_session(server.address)
    finally:
        for sock in silent:
            sock.close()
    correct_session(server.address)


def test_a_client_stalled_mid_frame_blocks_nobody(serve):
    """Half a Hello, then silence (slow loris): the session stays free for others."""
    from integration_envs import make_fuzz_env

    server = serve(make_fuzz_env())
    data = Fuzzer(server.env_contract).hello()
    with connect(server.address) as stalled:
        stalled.sendall(data[: len(data) // 2])
        correct_session(server.address)
        stalled.sendall(data[len(data) // 2 :])  # finishing late still gets a Welcome
        stalled.settimeout(SESSION_GUARD_SECONDS)
        head = PREFIX.unpack(stalled.recv(PREFIX.size, socket.MSG_WAITALL))
        assert head[2] == m.Welcome.KIND
