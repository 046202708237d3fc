"""Issue 25, no sockets: the sessions/prewarm arguments, the Pong fields, the CLI flags."""

from __future__ import annotations

import functools
import pickle
import threading

import pytest

from rlmesh._cli.serve import build_parser
from rlmesh._cli.serve_model import main as serve_model_main
from rlmesh._spawn import EnvRecipe
from rlmesh.serve import ServeOptions
from rlmesh.serve._sessions.control import Board, SessionSpec
from rlmesh.serve._sessions.server import check_sessions, check_target
from rlmesh.wire import messages as m


def test_check_sessions_accepts_counts_and_refuses_the_rest():
    assert check_sessions(4, 2) == (4, 2)
    assert check_sessions(1) == (1, 0)
    with pytest.raises(ValueError, match="sessions must be >= 1"):
        check_sessions(0)
    with pytest.raises(ValueError, match="prewarm must be >= 0"):
        check_sessions(2, -1)
    with pytest.raises(ValueError, match="prewarm=3 exceeds sessions=2"):
        check_sessions(2, 3)
    with pytest.raises(TypeError, match="sessions must be an int"):
        check_sessions(True)
    with pytest.raises(TypeError, match="sessions must be an int"):
        check_sessions(2.0)


class _Live:
    def reset(self):  # pragma: no cover - never called
        pass

    def step(self, action):  # pragma: no cover - never called
        pass


def _make():  # pragma: no cover - never called
    return _Live()


class _LockedMaker:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self):  # pragma: no cover - never called
        return _Live()


class _DuckFactory:
    def make(self):  # pragma: no cover - never called
        return _Live()


def test_a_target_must_be_buildable_in_another_process():
    check_target("CartPole-v1", 2)
    check_target(_make, 2)
    check_target(functools.partial(_make), 2)
    check_target(lambda: _Live(), 2)  # travels by value (cloudpickle)
    check_target(_DuckFactory(), 2)  # anything with make()
    with pytest.raises(
        TypeError, match=r"a live _Live instance, which cannot be copied.*sessions=1"
    ):
        check_target(_Live(), 2)
    with pytest.raises(TypeError, match="a list of env instances"):
        check_target([_Live(), _Live()], 2)
    with pytest.raises(
        TypeError,
        match=r"sessions=2 sends the env source to another process, but .*\.lock \(a _thread\.lock\) "
        r"cannot be pickled.*Pass a Gymnasium id",
    ):
        check_target(_LockedMaker(), 2)
    with pytest.raises(TypeError, match="got int"):
        check_target(3, 2)


def test_a_session_spec_travels_to_a_worker_with_its_options():
    spec = SessionSpec(
        EnvRecipe("CartPole-v1", {"x": 1}, num_envs=3),
        options=ServeOptions(idle_timeout_seconds=2.0),
    )
    back = pickle.loads(pickle.dumps(spec))
    assert back.recipe.source == "CartPole-v1" and back.recipe.num_envs == 3
    assert back.recipe.make_kwargs == {"x": 1} and back.options.idle_timeout_seconds == 2.0


def test_a_single_session_pong_keeps_its_bytes_and_a_multi_session_one_adds_the_counts():
    old = m.encode_message(m.Pong(state="ready", generation="g", service="env"), 1)
    assert b"".join(bytes(b) for b in old).endswith(
        b"\x93\xa5ready\xa1g\xa3env"
    )  # three fields, as before
    new = m.SessionsPong(state="busy", generation="g", service="env", sessions=3, limit=4)
    frame_bytes = b"".join(bytes(b) for b in m.encode_message(new, 1))
    assert frame_bytes.endswith(b"\x95\xa4busy\xa1g\xa3env\x03\x04")
    import numpy as np

    from rlmesh.wire.frames import decode_prefix, split_body

    plan = decode_prefix(frame_bytes[:24])
    frame = split_body(plan, np.frombuffer(frame_bytes[24:], np.uint8).copy())
    assert m.decode_header(frame) == m.Pong(
        state="busy", generation="g", service="env"
    )  # an old reader's view
    assert (m.decode_sessions_pong(frame).sessions, m.decode_sessions_pong(frame).limit) == (3, 4)
    plan = decode_prefix(b"".join(bytes(b) for b in old)[:24])
    frame = split_body(plan, np.frombuffer(b"".join(bytes(b) for b in old)[24:], np.uint8).copy())
    assert m.decode_sessions_pong(frame).limit == 0  # a single-session endpoint reports no counts


def test_the_serve_command_takes_sessions_and_prewarm():
    args = build_parser().parse_args(
        ["CartPole-v1", "--sessions", "4", "--prewarm", "2", "--num-envs", "3"]
    )
    assert (args.sessions, args.prewarm, args.num_envs) == (4, 2, 3)
    args = build_parser().parse_args(["CartPole-v1"])
    assert (args.sessions, args.prewarm) == (1, 0)  # the default: today's single session
    with pytest.raises(SystemExit):
        build_parser().parse_args(["CartPole-v1", "--sessions", "0"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["CartPole-v1", "--prewarm", "-1"])


def test_prewarm_beyond_sessions_is_a_usage_error(capsys):
    from rlmesh._cli.serve import main

    with pytest.raises(SystemExit) as exc:
        main(["CartPole-v1", "--sessions", "2", "--prewarm", "3"])
    assert exc.value.code == 2
    assert "--prewarm 3 exceeds --sessions 2" in capsys.readouterr().err


def test_serve_model_refuses_zero_sessions(capsys):
    with pytest.raises(SystemExit) as exc:
        serve_model_main(["mod:attr", "--sessions", "0"])
    assert exc.value.code == 2
    assert "--sessions must be >= 1" in capsys.readouterr().err


def test_session_workers_busy_poll_only_while_the_busy_sessions_fit_the_cores(monkeypatch):
    import time
    from types import SimpleNamespace

    from rlmesh.serve._sessions import worker

    monkeypatch.setattr(worker, "busy_poll_default", lambda: 0.001)
    monkeypatch.setattr(worker, "usable_cpus", lambda: 4)
    conn = SimpleNamespace(busy_poll=0.001)
    loop = SimpleNamespace(client=SimpleNamespace(conn=conn), on_request=None, fan_out_peer=False)
    board = Board(4)  # shared memory, as between the workers
    worker.watch_activity(loop, board, 0)
    loop.on_request()  # this session alone is busy: 2 x 1 <= 4 cores
    assert conn.busy_poll == 0.001
    now = time.monotonic()
    board[1] = board[2] = now  # three busy sessions need 6 cores
    board[3] = now - 10.0  # an idle one does not count
    worker.watch_activity(loop, board, 0)  # a fresh check window
    loop.on_request()
    assert conn.busy_poll == 0.0
    board[1] = board[2] = now - 10.0  # the others went idle
    worker.watch_activity(loop, board, 0)
    loop.on_request()
    assert conn.busy_poll == 0.001
    loop.fan_out_peer = True  # a client gathering many endpoints asked for no spinning
    worker.watch_activity(loop, board, 0)
    loop.on_request()
    assert conn.busy_poll == 0.0
    board.close()
