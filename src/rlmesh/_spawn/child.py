"""The first code a worker process runs: read its job from the pipe, run the target.

A worker reads one *payload* from its boot socket: a small header (the target
``"module:function"``, the parent's ``sys.path``, working directory and environment) pickled with the
standard library, then the target's arguments as ``cloudpickle`` bytes (a callable target
travels with them). It sets
``sys.path`` and the directory first, so the arguments unpickle exactly as they would in
the parent (a function the user's script defines travels by value; one from an
importable module is imported), then calls ``target(fds, *args)``. Nothing here imports
or runs the parent's ``__main__``.

The payload arrives the same way whichever start method made the process
(:mod:`rlmesh._spawn.process`): forked from the fork server, or a fresh interpreter.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "ORPHAN_TERM_SECONDS",
    "exit_code",
    "read_exactly",
    "read_payload",
    "run",
    "run_fresh",
    "watch_parent",
]

#: Seconds between the SIGTERM and the SIGKILL (or exit) that end an orphaned worker: the
#: fork server's children and a fresh worker alike (the owner waits for it, too).
ORPHAN_TERM_SECONDS = 3.0

_LEN = 8  # the payload's length prefix: 8 bytes, little endian


def read_payload(sock: socket.socket) -> bytes:
    """The length-prefixed payload the parent sends on the boot socket.

    Raises:
        EOFError: the parent went away before sending all of it.
    """
    size = int.from_bytes(read_exactly(sock, _LEN), "little")
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError("the parent process went away before sending the worker its job")
        got += k
    return bytes(buf)


def run(payload: bytes, fds: list[int]) -> int:
    """Unpack ``payload`` and call its target; the process's exit code."""
    target, path, cwd, environ, args_bytes = pickle.loads(payload)
    os.environ.clear()  # the parent's environment now, not the fork server's when it started
    os.environ.update(environ)
    sys.path[:] = path
    try:
        os.chdir(cwd)
    except OSError:
        pass
    args: tuple[Any, ...] = pickle.loads(args_bytes)
    if target is None:  # a callable, shipped with its arguments
        fn, *rest = args
        args = tuple(rest)
    else:
        module_name, _, function = target.partition(":")
        fn = getattr(importlib.import_module(module_name), function)
    fn(fds, *args)
    return 0


def exit_code(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` means (``None`` 0, an int itself, anything else 1)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_fresh(boot_fd: int, fds: list[int], orphan_grace: float = 10.0) -> None:
    """A fresh interpreter's entry (``RLMESH_WORKER_START=fresh``): payload, run, exit.

    The boot socket stays open until the process ends: its closing is the parent's sign
    that the worker exited, and the parent's end closing is this worker's sign that the
    parent is gone (:func:`watch_parent`).
    """
    boot = socket.socket(fileno=boot_fd)
    os.set_inheritable(boot_fd, False)  # nothing this worker starts keeps it open

    def body() -> int:
        payload = read_payload(boot)
        watch_parent(boot, orphan_grace)
        return run(payload, fds)

    run_then_exit(body)


def run_then_exit(body: Callable[[], int]) -> NoReturn:
    """End this process with ``body()``'s status once the standard streams are flushed.

    ``sys.exit(code)`` in the body gives that code (:func:`exit_code`); any other exception
    prints its traceback and gives 1. Nothing of the interpreter's shutdown runs (``os._exit``).
    """
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def watch_parent(
    boot: socket.socket, grace: float, term_seconds: float = ORPHAN_TERM_SECONDS
) -> None:
    """End this process when the parent's end of ``boot`` closes (the parent is gone) and
    the worker has not ended by itself within ``grace`` seconds: SIGTERM, then exit.

    A daemon thread that only polls the socket (it reads nothing): what a fork server does
    for its children, for a worker that has no fork server.
    """

    def watch() -> None:
        poller = select.poll()
        poller.register(boot.fileno(), select.POLLRDHUP)
        while True:
            events = poller.poll()
            if any(ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR) for _fd, ev in events):
                break
            if any(ev & select.POLLNVAL for _fd, ev in events):
                return  # the socket was closed here: the worker is exiting anyway
        time.sleep(grace)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(term_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="rlmesh-parent-watch", daemon=True).start()
