"""The venv backend's log keeper and watchdog (issue 28 items 16-17), without a venv.

The keeper is the small process that stores a sandbox server's output (rotating at a
cap) and stops the server when the owner dies; it is driven here with a stand-in server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from rlmesh.sandbox import _venv

pytestmark = pytest.mark.slow  # sandbox (keeper and server processes): kept out of make test-fast


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _keeper_argv(rundir: Path, cap: int, owner: int, server: int) -> list[str]:
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _venv._KEEPER,
        str(rundir / "server.log"),
        str(cap),
        str(owner),
        str(server),
        str(rundir),
        "1.0",
        "0.05",
    ]


def test_the_tail_of_a_huge_log_is_read_in_o_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB (sparse)
        f.seek(0, os.SEEK_END)
        f.write(b"first\nsecond\nthe last line\n")
    tracemalloc.start()
    try:
        tail = _venv._tail_file(log, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail == "second\nthe last line"
    assert peak < 1 << 20  # a few tail buffers, not the 1 GiB file


def test_a_rotated_log_still_gives_enough_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    (tmp_path / "server.log.1").write_text("".join(f"old {i}\n" for i in range(10)))
    log.write_text("new 0\n")
    assert _venv._tail_file(log, 3, previous=tmp_path / "server.log.1").splitlines() == [
        "old 8",
        "old 9",
        "new 0",
    ]
    assert _venv._tail_file(tmp_path / "missing.log", 3) == "<no log>"


def test_the_keeper_rotates_at_its_cap_and_keeps_the_tail(tmp_path: Path) -> None:
    cap = 64 * 1024
    server = subprocess.Popen(["sleep", "60"], start_new_session=True)
    keeper = subprocess.Popen(
        _keeper_argv(tmp_path, cap, os.getpid(), server.pid), stdin=subprocess.PIPE
    )
    try:
        assert keeper.stdin is not None
        line = b"x" * 99 + b"\n"
        for _ in range(30_000):  # 3 MB
            keeper.stdin.write(line)
        keeper.stdin.write(b"the end\n")
        keeper.stdin.close()
        assert keeper.wait(timeout=30) == 0
        sizes = [p.stat().st_size for p in tmp_path.glob("server.log*")]
        assert len(sizes) == 2 and max(sizes) <= cap
        assert (
            _venv._tail_file(tmp_path / "server.log", 1, previous=tmp_path / "server.log.1")
            == "the end"
        )
        assert not _gone(server.pid)  # a live owner: the keeper never touches the server
        assert tmp_path.exists()
    finally:
        server.kill()
        server.wait(timeout=10)


@pytest.mark.parametrize("ignores_term", [False, True])
def test_the_keeper_stops_the_server_when_the_owner_dies(
    tmp_path: Path, ignores_term: bool
) -> None:
    """A stuck server (one that even ignores SIGTERM) is gone within a bound after its owner's kill -9."""
    rundir = tmp_path / "run"
    rundir.mkdir()
    trap = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    owner_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        r, w = os.pipe()
        server = subprocess.Popen([sys.executable, "-c", {trap if ignores_term else "import time; time.sleep(120)"!r}],
                                  stdout=w, start_new_session=True)
        os.close(w)
        keeper = subprocess.Popen({_keeper_argv(rundir, 65536, 0, 0)[:5]!r} + [{str(rundir / "server.log")!r}, "65536",
                                  str(os.getpid()), str(server.pid), {str(rundir)!r}, "1.0", "0.05"], stdin=r)
        print(server.pid, keeper.pid, flush=True)
        time.sleep(120)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    server_pid = keeper_pid = 0
    try:
        assert owner.stdout is not None
        server_pid, keeper_pid = map(int, owner.stdout.readline().split())
        time.sleep(0.3)
        assert not _gone(server_pid)
        owner.kill()
        owner.wait(timeout=10)
        for _ in range(100):  # bounded: 10 s (poll 0.05 s, grace 1 s)
            if _gone(server_pid) and _gone(keeper_pid):
                break
            time.sleep(0.1)
        assert _gone(server_pid) and _gone(keeper_pid)
        assert not rundir.exists()  # nobody else is left to remove the run directory
    finally:
        for pid in (server_pid, keeper_pid):
            if pid and not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_log_cap_is_configurable_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_SANDBOX_LOG_BYTES", "1000000")
    assert _venv.log_cap() == 1_000_000
    monkeypatch.setenv("RLMESH_SANDBOX_LOG_BYTES", "10")
    assert _venv.log_cap() == 64 * 1024
    monkeypatch.setenv("RLMESH_SANDBOX_LOG_BYTES", "lots")
    with pytest.raises(ValueError, match="RLMESH_SANDBOX_LOG_BYTES"):
        _venv.log_cap()
