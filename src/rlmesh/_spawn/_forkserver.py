"""The fork server's main loop: a clean interpreter that forks workers on request.

Started by :class:`rlmesh._spawn.process.Spawner` as ``python -c`` (never ``-m``, never the
user's script): it imports rlmesh and the heavy modules its parent asked for once, then
waits on its control socket. Each request carries a *boot socket* and the file
descriptors the worker inherits (``SCM_RIGHTS``). The server forks; the child closes
everything of the server's, reads its job from the boot socket and runs it
(:mod:`rlmesh._spawn.child`); the server writes the child's pid to the boot socket, and,
when the child exits, its exit status (a negative number: the signal that ended it), then
closes it -- the parent's sentinel.

The server has no threads (forking it is safe where forking the parent, with its threads,
torch or jax, is not), ignores Ctrl-C (the parent decides), and exits once its parent
closed the control socket and every child it forked has exited. A closed control socket
is also how the server learns that its parent died (even by SIGKILL): from then on each
child has the *orphan grace* its fork request named to end by itself; then it gets
SIGTERM and, :data:`~.child.ORPHAN_TERM_SECONDS` later, SIGKILL. So no worker outlives its
parent by more than its grace (a worker stuck inside an env call included), and neither
does the server.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys
import time
from collections.abc import Iterable
from typing import Any

from .child import ORPHAN_TERM_SECONDS, read_payload, run, run_then_exit

__all__ = ["main"]

_MAX_REQUEST_BYTES = 64 * 1024
_MAX_FDS = 16


def _preload(modules: Iterable[str]) -> None:
    for name in modules:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a preload only saves time; the worker imports what it needs
            pass


def _send_status(sock: socket.socket, value: int) -> None:
    try:
        sock.sendall(value.to_bytes(8, "little", signed=True))
    except OSError:
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    """Collect every exited child; tell its parent how it ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock = children.pop(pid, None)
        if sock is not None:
            _send_status(sock, os.waitstatus_to_exitcode(status))
            sock.close()


def _child(boot: socket.socket, fds: list[int], server_objs: list[Any]) -> None:
    """In the forked child: drop the server's state, read the job, run it, exit."""

    def body() -> int:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for obj in server_objs:
            if isinstance(obj, int):
                os.close(obj)
            else:
                obj.close()
        payload = read_payload(boot)
        boot.close()
        return run(payload, fds)

    run_then_exit(body)


class _Orphans:
    """The children's deadlines once the parent is gone: SIGTERM at the grace, then SIGKILL."""

    def __init__(self, graces: dict[int, float]) -> None:
        now = time.monotonic()
        self.deadline = {pid: now + grace for pid, grace in graces.items()}
        self.signal = dict.fromkeys(graces, int(signal.SIGTERM))

    def enforce(self, children: dict[int, socket.socket]) -> float:
        """Signal the children past their deadline; the seconds until the next deadline."""
        now = time.monotonic()
        wait = 5.0
        for pid in list(self.deadline):
            if pid not in children:  # reaped: its pid is not signalled again
                del self.deadline[pid]
                continue
            if now >= self.deadline[pid]:
                try:  # still our unreaped child, so the pid names no other process
                    os.kill(pid, self.signal[pid])
                except OSError:
                    pass
                self.deadline[pid] = now + ORPHAN_TERM_SECONDS
                self.signal[pid] = int(signal.SIGKILL)
            wait = min(wait, max(0.0, self.deadline[pid] - now))
        return wait


def main(ctrl_fd: int, preload: list[str]) -> None:
    """Serve fork requests on ``ctrl_fd`` until the parent closes it and every child ended."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload(preload)
    ctrl = socket.socket(fileno=ctrl_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes select via wake_w
    children: dict[int, socket.socket] = {}
    graces: dict[int, float] = {}  # pid -> seconds it may outlive the parent
    orphans: _Orphans | None = None  # the parent is gone: the children's deadlines
    serving = True
    while serving or children:
        watch: list[Any] = [wake_r, ctrl] if serving else [wake_r]
        timeout = 5.0 if orphans is None else orphans.enforce(children)
        ready = select.select(watch, [], [], timeout)[0]
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except OSError:
                pass
        _reap(children)
        if not serving or ctrl not in ready:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, _MAX_REQUEST_BYTES, _MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data or not fds:
            for fd in fds:
                os.close(fd)
            serving = False  # the parent is gone (or done): finish with the children we have
            ctrl.close()
            orphans = _Orphans({pid: graces.get(pid, 0.0) for pid in children})
            continue
        _kind, more, grace = pickle.loads(data)
        _preload(more)
        boot = socket.socket(fileno=fds[0])
        inherited = fds[1:]
        try:
            pid = os.fork()
        except OSError:
            boot.close()  # the parent reads EOF instead of a pid: it says so
            for fd in inherited:
                os.close(fd)
            continue
        if pid == 0:
            _child(boot, inherited, [ctrl, wake_r, wake_w, *children.values()])
        for fd in inherited:
            os.close(fd)
        _send_status(boot, pid)
        children[pid] = boot
        graces[pid] = float(grace)
        for gone in [p for p in graces if p not in children and p != pid]:
            del graces[gone]
