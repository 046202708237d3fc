"""The floor: a minimal Python ping-pong over TCP or a Unix socket (child process echo).

A request of ``size`` bytes is answered with ``reply`` bytes (``size`` unless given): the
least any served step that sends that much each way can cost.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

_ECHO = r"""
import socket, sys
fam, addr, size, reply = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_UNIX if fam == "unix" else socket.AF_INET, socket.SOCK_STREAM)
if fam == "unix":
    s.bind(addr)
else:
    s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1] if fam != "unix" else addr, flush=True)
c, _ = s.accept()
if fam != "unix":
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray(size); view = memoryview(buf); answer = bytes(reply)
while True:
    got = 0
    while got < size:
        n = c.recv_into(view[got:])
        if not n:
            sys.exit(0)
        got += n
    c.sendall(answer)
"""


def raw_round_trip_us(
    transport: str, size: int, n: int, reps: int = 5, reply: int | None = None
) -> list[float]:
    """Mean µs per round trip of ``size`` bytes (answered with ``reply``), one value per repetition."""
    reply = size if reply is None else reply
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "echo.sock")
        proc = subprocess.Popen(
            [sys.executable, "-c", _ECHO, transport, path, str(size), str(reply)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            where = proc.stdout.readline().strip()
            if transport == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(where)
            else:
                s = socket.create_connection(("127.0.0.1", int(where)))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            payload = bytes(size)
            buf = bytearray(reply)
            view = memoryview(buf)

            def rt() -> None:
                s.sendall(payload)
                got = 0
                while got < reply:
                    got += s.recv_into(view[got:])

            for _ in range(50):
                rt()
            out = []
            for _ in range(reps):
                t0 = time.perf_counter()
                for _ in range(n):
                    rt()
                out.append((time.perf_counter() - t0) / n * 1e6)
            s.close()
            return out
        finally:
            proc.kill()
            proc.wait()
