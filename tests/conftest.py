"""Fixtures shared by the whole suite: servers in threads and in subprocesses.

- ``RLMESH_WORKFLOW_EDITION=""`` is set at import so no test (and no child process)
  emits ``WorkflowEditionWarning`` (DELTA-8).
- ``TMPDIR`` points at a fresh directory of this run (removed at its end), for the tests
  and every child process: nothing a test sees depends on what other programs left in
  the machine's temp dir (a recorder warns about the staging dirs it finds there). Ray
  keeps its own session dir where it would have been.
- :func:`serve` starts ``EnvServer(env, ...).start()`` on ``127.0.0.1:0`` or on a Unix
  socket in a short private temp dir, and shuts every server down after the test.
- :func:`serve_process` runs ``rlmesh serve TARGET`` (``python -m rlmesh.cli serve``) in a child process, waits
  for its ``--ready-file`` and returns the process and the bound address; the child is
  killed (by its pid) after the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["RLMESH_WORKFLOW_EDITION"] = ""  # quiet WorkflowEditionWarning everywhere (DELTA-8)

from hypothesis import settings as _hypothesis_settings

_MACHINE_TMP = tempfile.gettempdir()
os.environ.setdefault("RAY_TMPDIR", _MACHINE_TMP)  # Ray's socket paths stay short
RUN_TMP = tempfile.mkdtemp(prefix="rt")  # short: unix socket paths live below it
os.environ["TMPDIR"] = RUN_TMP
tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    # Removed at exit, after multiprocessing's own clean-up of the temp dir it made below
    # RUN_TMP (its finalizer has priority -100 and would fail on a dir already gone).
    from multiprocessing import util

    util.Finalize(
        None, shutil.rmtree, args=(RUN_TMP,), kwargs={"ignore_errors": True}, exitpriority=-101
    )


# The suite never runs with the caller's own token or TLS settings (docs/security.md): a test
# that wants them sets them itself.
for _name in ("RLMESH_TOKEN", "RLMESH_TLS_CA", "RLMESH_TLS_CERT", "RLMESH_TLS_KEY"):
    os.environ.pop(_name, None)

# CI runs the property tests derandomized (reproducible); locally they explore new inputs.
_hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
#: ``HYPOTHESIS_PROFILE=fast`` (``make test-fast``): every property test draws at most this many
#: examples, whatever its own ``@settings`` ask; ``make test`` runs each test's own count.
FAST_MAX_EXAMPLES = 10
_hypothesis_settings.register_profile("fast", max_examples=FAST_MAX_EXAMPLES, deadline=None)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the ``fast`` Hypothesis profile, cap each property test's own ``max_examples``."""
    if os.environ.get("HYPOTHESIS_PROFILE") != "fast":
        return
    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)  # a method's function carries the settings
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is not None and own.max_examples > FAST_MAX_EXAMPLES:
            test._hypothesis_internal_use_settings = _hypothesis_settings(
                own, max_examples=FAST_MAX_EXAMPLES
            )


# -- threads a test leaves running ------------------------------------------------------------------
# A thread one test leaves behind changes what later tests see (busy polling, for one, turns
# itself off while other Python threads run). The threads a test's call started that still run,
# non-daemon, once its teardown is over are named in the run's summary (a report, not a
# failure: a module-scoped fixture's threads start in setup and are not counted).
_THREADS_BEFORE = pytest.StashKey[set[threading.Thread]]()
_LEFT_THREADS: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    item.stash[_THREADS_BEFORE] = set(threading.enumerate())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    before = item.stash.get(_THREADS_BEFORE, None)
    if before is None:
        return
    left = [t for t in threading.enumerate() if t not in before and not t.daemon]
    deadline = time.monotonic() + 1.0  # a thread already on its way out may finish
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    names = sorted(t.name for t in left if t.is_alive())
    if names:
        _LEFT_THREADS.append(f"{item.nodeid}: {', '.join(names)}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _LEFT_THREADS:
        terminalreporter.write_sep("-", "tests that left non-daemon threads running")
        for line in _LEFT_THREADS:
            terminalreporter.write_line(line)


REQUIRE_ALL = os.environ.get("RLMESH_REQUIRE_ALL", "") not in ("", "0")


def require(module: str, reason: str = "") -> Any:
    """Import an optional dependency or skip the test (fail instead under RLMESH_REQUIRE_ALL=1).

    ``.ci/run`` installs every optional dependency and sets ``RLMESH_REQUIRE_ALL=1``, so a
    skip there would hide a broken install: it becomes a failure. On a developer's machine
    the test skips with the reason.
    """
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        why = f"{module} is not installed" + (f" ({reason})" if reason else "") + f": {exc}"
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)


def require_tool(name: str, reason: str = "") -> str:
    """Path of an executable on PATH, or skip (fail under RLMESH_REQUIRE_ALL=1)."""
    path = shutil.which(name)
    if path is None:
        why = f"{name} is not on PATH" + (f" ({reason})" if reason else "")
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)
    return path


def loopback_only() -> bool:
    """True when this process's network namespace has no interface but ``lo``.

    Ray advertises (and dials) the host's interface address unless it can see nothing but
    loopback, so the Ray tests run only in such a namespace (``make test-ray`` enters one
    with ``unshare -n`` as root): no Ray test can reach another address.
    """
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def in_loopback_namespace(cmd: list[str]) -> list[str]:
    """``cmd`` run in a network namespace whose only interface is lo (root, ``unshare`` and
    ``ip`` needed, as ``make test-ray``): a test may bind 0.0.0.0 there and reach no other
    host. Skips (fails under RLMESH_REQUIRE_ALL=1) where that is not possible."""
    if loopback_only():
        return cmd
    unshare = require_tool("unshare", "binding 0.0.0.0 in a loopback-only network namespace")
    require_tool("ip", "bringing lo up in that namespace")
    if os.geteuid() != 0:
        why = "binding 0.0.0.0 in a test needs a loopback-only namespace (unshare -n): run as root"
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why)
    return [unshare, "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]


def require_ray() -> Any:
    """Import ``ray`` for a Ray test, or skip (fail under RLMESH_REQUIRE_ALL=1).

    Also refuses to run outside a loopback-only network namespace (see :func:`loopback_only`).
    """
    ray = require("ray", "the rlmesh[ray] extra")
    if not loopback_only():
        why = (
            "Ray tests run only in a network namespace whose sole interface is lo "
            "(run them with `make test-ray`, which uses `unshare -n` as root)"
        )
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why)
    return ray


_RAY_INIT = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray (2 CPUs) for one test module; shut down after it."""
    ray = require_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local", num_cpus=2, **_RAY_INIT
    )  # never join another test's cluster (/tmp/ray)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster3() -> Iterator[Any]:
    """A simulated 3-node Ray cluster (``ray.cluster_utils.Cluster``, 1 CPU each) on loopback.

    Yields the ``Cluster``; the driver is connected to it (``ray.init(address=...)``). A test
    may ``cluster.remove_node(node)`` to lose a node.
    """
    ray = require_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, **_RAY_INIT)
        _wait_schedulable(ray)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _wait_schedulable(ray: Any) -> None:
    """Block until this driver can place a 1-CPU task on every node of the cluster (bounded).

    ``wait_for_nodes`` only waits for the nodes to register; the driver's raylet learns of
    their free CPUs a moment later, and until then it places actors, ``SPREAD`` ones too, on
    the nodes it already knows. One task pinned to each node runs only once it does.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def node_id() -> str:
        return str(ray.get_runtime_context().get_node_id())

    probe = ray.remote(num_cpus=1)(node_id)
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
        for n in nodes
    ]
    assert sorted(ray.get(refs, timeout=120)) == sorted(nodes)


TESTS_DIR = Path(__file__).resolve().parent
INTEGRATION_DIR = TESTS_DIR / "integration"
SERVER_START_SECONDS = 60.0  # generous: a cold child imports numpy, msgspec and gymnasium


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short private directory (Unix socket paths must stay under ~100 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rlm-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(short_tmp: Path) -> Iterator[Callable[..., Any]]:
    """``serve(env, transport="tcp", **kwargs) -> EnvServer``, started in a background thread.

    ``transport="unix"`` binds a fresh socket in :func:`short_tmp`. Extra keyword
    arguments go to ``EnvServer``. Every server is shut down after the test.
    """
    from rlmesh import EnvServer

    servers: list[Any] = []

    def _serve(env: Any, transport: str = "tcp", **kwargs: Any) -> Any:
        if transport == "unix":
            address = f"unix://{short_tmp}/env{len(servers)}.sock"
        elif transport == "tcp":
            address = "127.0.0.1:0"
        else:
            raise ValueError(f"transport must be 'tcp' or 'unix', got {transport!r}")
        server = EnvServer(env, address, **kwargs).start()
        servers.append(server)
        return server

    yield _serve
    for server in servers:
        server.shutdown()


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process: tests/integration importable, no edition warning."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLMESH_")}
    env["RLMESH_WORKFLOW_EDITION"] = ""
    paths = [str(INTEGRATION_DIR), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


def wait_for_ready_file(proc: subprocess.Popen[Any], ready_file: Path, timeout: float) -> str:
    """Wait until the child wrote its bound address (RDY-3) or died; return the address."""
    deadline = time.monotonic() + timeout
    while not ready_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the server process exited early with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server process did not become ready within {timeout:.0f}s")
        time.sleep(0.02)
    return ready_file.read_text().strip()


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Stop a child we started, by its pid: SIGINT, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def startup_line(cmd: list[str]) -> str:
    """The first line a serving command prints (its start-up line); the command is stopped after."""
    proc = subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        return proc.stdout.readline()
    finally:
        stop_process(proc)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (workers, a fork server, helpers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def procs_alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    alive = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            alive.append(pid)
    return alive


def wait_gone(pids: list[int] | set[int], within: float = 15.0) -> list[int]:
    """Wait (at most ``within`` seconds) until none of ``pids`` runs; return those that still
    do, SIGKILLed so that no test leaves one behind (assert the list is empty)."""
    deadline = time.monotonic() + within
    while procs_alive(list(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = procs_alive(list(pids))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def journaled(path: Path) -> int:
    """Episodes in a run journal (SQLite), 0 before it exists."""
    if not path.exists():
        return 0
    db = sqlite3.connect(path, timeout=10)
    try:
        return int(db.execute("SELECT count(*) FROM episodes").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0
    finally:
        db.close()


def kill_driver_when(
    script: str, env: dict[str, str], ready: Callable[[], bool], within: float
) -> None:
    """Run ``python -c script`` (a run's driver) and SIGKILL it once ``ready()`` holds.

    Fails when the driver ends by itself first or ``ready()`` does not hold within
    ``within`` seconds; the driver never outlives the call.
    """
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + within
        while not ready():
            assert proc.poll() is None, (
                f"the driver ended before it was killed: {proc.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
            )
            assert time.monotonic() < deadline, f"the driver was not ready within {within} s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def serve_process(short_tmp: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], str]]]:
    """``serve_process(target, *args, transport="tcp") -> (process, address)``.

    Runs ``python -m rlmesh.cli serve TARGET --address ... --ready-file ...`` (the
    ``rlmesh serve`` console command, positional env target) with
    ``tests/integration`` on ``PYTHONPATH`` (so ``module:attr`` targets there work).
    """
    procs: list[subprocess.Popen[bytes]] = []

    def _spawn(
        target: str, *args: str, transport: str = "tcp", env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], str]:
        n = len(procs)
        address = f"unix://{short_tmp}/proc{n}.sock" if transport == "unix" else "127.0.0.1:0"
        ready = short_tmp / f"ready{n}"
        # The `rlmesh serve` grammar (positional env target); `python -m rlmesh.serve` takes a model
        # positionally and an env with --env (CNF2-A9).
        cmd = [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            target,
            "--address",
            address,
            "--ready-file",
            str(ready),
            *args,
        ]
        # stderr goes to a file, never a pipe: a chatty child must not block on a full pipe
        with open(short_tmp / f"proc{n}.err", "wb") as err:
            proc = subprocess.Popen(
                cmd, env=env or child_env(), stdout=subprocess.DEVNULL, stderr=err
            )
        procs.append(proc)
        try:
            return proc, wait_for_ready_file(proc, ready, SERVER_START_SECONDS)
        except RuntimeError as exc:
            text = (short_tmp / f"proc{n}.err").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; stderr tail:\n{text}") from None

    yield _spawn
    for proc in procs:
        stop_process(proc)
