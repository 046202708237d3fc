"""Worker processes start clean: no ``if __name__ == "__main__":`` guard needed (issue 34 item 5).

``rlmesh.run(..., workers=N)`` on the processes backend and ``EnvServer(..., sessions=N)``
start their workers through :mod:`rlmesh._spawn.process`: a clean fork server fed each job
by pipe, so a worker never re-runs the script that started it, and what the script defines
(its policy, its env class, its env factory) travels by value. The scripts here have no
guard; each prints one line when its body runs, so a worker that re-ran it would show.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import rlmesh
from conftest import child_env, descendants, require, wait_gone
from rlmesh._spawn.process import Spawner, describe_exit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

require("gymnasium")

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import numpy as np
    import gymnasium as gym
    import rlmesh
    import rlmesh.numpy as rnp

    print("script body ran in", os.getpid(), flush=True)  # once: workers never run this file


    class Walk(gym.Env):  # defined here: it travels to the workers by value
        observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float64)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, side="", sleep_s=0.0):
            self.side, self.sleep_s = side, sleep_s

        def reset(self, *, seed=None, options=None):
            self.rng = np.random.default_rng(seed)
            self.seed, self.pos, self.t = seed, 0.0, 0
            return np.array([0.0, float(os.getpid())]), {"pid": os.getpid()}

        def step(self, action):
            time.sleep(self.sleep_s)
            self.t += 1
            self.pos += float(self.rng.normal()) + (0.1 if int(action) else -0.1)
            done = abs(self.pos) > 3.0 or self.t >= 25
            if done and self.side:
                with open(self.side, "a") as fh:
                    fh.write(f"{self.seed}\\n")
            return np.array([self.pos, float(self.t)]), self.pos, abs(self.pos) > 3.0, self.t >= 25, {}


    class WalkMaker:  # an env factory that is not an EnvFactory: anything with make()
        def __init__(self, side="", sleep_s=0.0):
            self.side, self.sleep_s = side, sleep_s

        def make(self):
            return Walk(self.side, self.sleep_s)


    def policy(obs):
        return int(obs[0] < 0)


    def key(result):
        return [[e.index, e.seed, e.steps, round(e.reward, 9)] for e in result.episodes]


    mode, arg = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    workers = rlmesh.Workers(n=3, backend="processes", progress=False)
    if mode == "equal":
        one = rlmesh.run(policy, WalkMaker(), seeds=range(12))
        many = rlmesh.run(policy, WalkMaker(), seeds=range(12), workers=workers)
        pids = sorted({w.pid for w in many.workers})
        print(json.dumps({"equal": key(one) == key(many), "n": len(many.episodes), "pids": pids}))
    elif mode == "journal":
        side, journal = arg.split(",")
        resumed = rlmesh.run(
            policy, WalkMaker(side, 0.02), seeds=range(24), workers=workers, journal=journal
        )
        one = rlmesh.run(policy, WalkMaker(), seeds=range(24))
        print(json.dumps({"equal": key(resumed) == key(one)}))
    elif mode == "unpicklable":

        class Locked:
            def __init__(self):
                self.lock = threading.Lock()

            def __call__(self, obs):
                return 0

        rlmesh.run(Locked(), WalkMaker(), seeds=range(4), workers=2)
    elif mode == "sessions":
        options = rlmesh.ServeOptions(workflow_edition="2026.06")
        server = rlmesh.EnvServer(Walk, "127.0.0.1:0", sessions=2, options=options).start()
        with rnp.RemoteEnv(server.address) as a, rnp.RemoteEnv(server.address) as b:
            pids = [a.reset(seed=1)[1]["pid"], b.reset(seed=1)[1]["pid"]]
            a.step(0)
        server.shutdown()
        print(json.dumps({"pids": pids, "stopped": server.stop_reason}))
    elif mode == "serve_env":
        rlmesh.serve.serve_env(WalkMaker(), arg, sessions=2, workflow_edition="2026.06")
    """
)


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "noguard.py"
    path.write_text(SCRIPT)
    return path


def _body_runs(out: str) -> int:
    return sum(1 for line in out.splitlines() if line.startswith("script body ran in"))


def _last_json(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _run(script: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        env=child_env(),
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("start", ["forkserver", "fresh"])
def test_a_script_without_a_guard_runs_workers_and_equals_one_process(
    tmp_path: Path, start: str
) -> None:
    script = _script(tmp_path)
    env = {"RLMESH_WORKER_START": start}
    proc = subprocess.run(
        [sys.executable, str(script), "equal"],
        env=child_env(**env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _body_runs(proc.stdout) == 1  # the workers never re-ran the script
    result = _last_json(proc.stdout)
    assert result["equal"] and result["n"] == 12
    assert "Traceback" not in proc.stderr


def test_a_script_without_a_guard_resumes_from_its_journal(tmp_path: Path) -> None:
    script = _script(tmp_path)
    side, journal = tmp_path / "episodes", tmp_path / "run.journal"
    proc = subprocess.Popen(
        [sys.executable, str(script), "journal", f"{side},{journal}"],
        env=child_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    done = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and done < 8:
            if journal.exists():
                try:
                    with sqlite3.connect(journal, timeout=5) as db:
                        done = db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
                except sqlite3.OperationalError:
                    done = 0
            time.sleep(0.02)
        assert proc.poll() is None, f"the driver ended before it was killed: {proc.stderr.read()}"
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies mid-run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert 8 <= done < 24
    again = _run(script, "journal", f"{side},{journal}")  # the same call: only the rest runs
    assert _body_runs(again.stdout) == 1
    assert _last_json(again.stdout)["equal"]
    seeds = [int(x) for x in side.read_text().split()]
    assert sorted(seeds) == list(range(24))  # every seed ran exactly once over both runs


def test_what_cannot_travel_is_one_line_naming_it_and_the_fix(tmp_path: Path) -> None:
    proc = _run(_script(tmp_path), "unpicklable", check=False)
    assert proc.returncode == 1
    assert proc.stderr.count("Traceback") == 1  # the user's own call, nothing from workers
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("TypeError: workers= sends the model to another process, but ")
    assert ".lock (a _thread.lock) cannot be pickled" in last
    assert "Pass a picklable model, or a class / zero-argument factory" in last
    assert len(proc.stderr.splitlines()) < 40


def test_a_script_without_a_guard_serves_many_sessions(tmp_path: Path) -> None:
    proc = _run(_script(tmp_path), "sessions")
    assert _body_runs(proc.stdout) == 1
    result = _last_json(proc.stdout)
    driver = int(proc.stdout.split("script body ran in ")[1].split()[0])
    assert len(set(result["pids"])) == 2 and driver not in result["pids"]
    assert result["stopped"] == "shutdown"


def test_serve_env_with_sessions_at_the_top_of_a_script(tmp_path: Path) -> None:
    sock = tmp_path / "env.sock"
    proc = subprocess.Popen(
        [sys.executable, str(_script(tmp_path)), "serve_env", f"unix://{sock}"],
        env=child_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]  # the body's line, then the address
        assert lines[0].startswith("script body ran in") and "serving env on" in lines[1], lines
        import rlmesh.numpy as rnp

        with rnp.RemoteEnv(f"unix://{sock}") as a, rnp.RemoteEnv(f"unix://{sock}") as b:
            pids = {a.reset(seed=0)[1]["pid"], b.reset(seed=0)[1]["pid"]}
            assert len(pids) == 2 and proc.pid not in pids
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and _body_runs(lines[0] + out) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the start policy itself ---------------------------------------------------------------------


def _reply(fds: list[int], word: str) -> None:
    with socket.socket(fileno=fds[0]) as s:
        if word == "env":
            word = os.environ.get("RLMESH_TEST_MARK", "unset")
        s.sendall(f"{word} {os.getpid()}".encode())
        if word == "wait":
            s.recv(1)  # until the test closes its end (or kills this worker)


def _children() -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            continue
    return out


@pytest.mark.parametrize("start", ["forkserver", "fresh"])
def test_a_worker_runs_a_function_defined_here_and_says_how_it_ended(
    start: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMESH_WORKER_START", start)
    before = _children()
    spawner = Spawner()
    try:
        mine, theirs = socket.socketpair()
        done = spawner.launch(_reply, ("hello",), pass_fds=[theirs.fileno()]).wait()
        theirs.close()
        assert mine.recv(64).decode() == f"hello {done.pid}"
        done.join(30)
        assert done.exitcode == 0 and not done.is_alive()
        mine, theirs = socket.socketpair()
        stuck = spawner.launch(_reply, ("wait",), pass_fds=[theirs.fileno()]).wait()
        theirs.close()
        assert mine.recv(64).decode().startswith("wait ")
        stuck.kill()
        stuck.join(30)
        assert describe_exit(stuck.exitcode) == "killed by signal 9 (SIGKILL)"
        mine.close()
        monkeypatch.setenv("RLMESH_TEST_MARK", "now")  # after the fork server started
        mine, theirs = socket.socketpair()
        seen = spawner.launch(_reply, ("env",), pass_fds=[theirs.fileno()]).wait()
        theirs.close()
        assert mine.recv(64).decode() == f"now {seen.pid}"  # the parent's environment, as it is
        seen.join(30)
        mine.close()
    finally:
        spawner.close()
    deadline = time.monotonic() + 15
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children() - before == set()  # the fork server went with its last user


def test_arguments_that_cannot_travel_are_refused_before_any_worker_starts() -> None:
    import threading

    spawner = Spawner()
    try:
        with pytest.raises(TypeError, match=r"<tuple>\[1\] \(a _thread\.lock\) cannot be pickled"):
            spawner.launch(_reply, (threading.Lock(),)).wait()
    finally:
        spawner.close()


def test_a_bad_start_method_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_WORKER_START", "teleport")
    with pytest.raises(ValueError, match="RLMESH_WORKER_START='teleport' is not a start method"):
        Spawner()


def test_the_distributed_example_needs_no_guard(tmp_path: Path) -> None:
    """A copy of examples/distributed_eval.py with its guard removed runs the same."""
    example = Path(rlmesh.__file__).resolve().parents[2] / "examples" / "distributed_eval.py"
    text = example.read_text()
    if 'if __name__ == "__main__":' not in text:
        pytest.skip("the example has no guard to remove")
    head, _, body = text.partition('if __name__ == "__main__":')
    unguarded = head + textwrap.dedent(body)
    path = tmp_path / "distributed_eval_noguard.py"
    path.write_text(unguarded)
    proc = subprocess.run(
        [sys.executable, str(path)],
        env=child_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


ORPHAN_OWNER = textwrap.dedent(
    """
    import os, signal, sys, time
    from rlmesh._spawn.process import Spawner

    def stubborn(fds, path):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it will not stop when asked
        with open(path, "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(0.05)  # stuck, as an env inside a call that never returns

    spawner = Spawner()
    spawner.launch(stubborn, (sys.argv[1],), orphan_grace=float(sys.argv[2])).wait()
    time.sleep(600)  # until the test SIGKILLs this owner
    """
)


@pytest.mark.parametrize("start", ["forkserver", "fresh"])
def test_a_worker_never_outlives_its_killed_owner_past_its_grace(
    tmp_path: Path, start: str
) -> None:
    """The owner is SIGKILLed; its worker ignores SIGTERM and never returns: after its orphan
    grace it is sent SIGTERM, then SIGKILL, and the fork server goes too (issue 38 item 5)."""
    script, pid_file = tmp_path / "owner.py", tmp_path / "worker.pid"
    script.write_text(ORPHAN_OWNER)
    owner = subprocess.Popen(
        [sys.executable, str(script), str(pid_file), "1.0"],
        env=child_env(RLMESH_WORKER_START=start),
        stderr=subprocess.DEVNULL,
    )
    below: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        # the file exists before the worker wrote its pid into it: wait for the pid
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        below = descendants(owner.pid)
        assert worker in below
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(30)
        # grace 1 s + 3 s to the SIGKILL, with room to spare
        assert wait_gone(below, within=30) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        wait_gone(below, within=0)  # on a failure, nothing is left behind
