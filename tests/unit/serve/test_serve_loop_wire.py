"""The serve loop, in process, as a client sees it: replies, errors, and a server that survives.

Each test starts an ``EnvServer`` on a unix socket in this process and talks to it with
the sans-IO client session (``serve_wire.Wire``): no subprocess, no TCP.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    Wire,
    frame_bytes,
    no_threads_left_fixture,
    obs_of,
    short_dir_fixture,
    started_fixture,
)

from rlmesh.errors import CODE_NUMBERS
from rlmesh.serve import EnvServer, ServeOptions
from rlmesh.wire import frames, handshake, messages as m
from rlmesh.wire.frames import MAGIC, PREFIX, VERSION
from rlmesh.wire.session import READY

pytestmark = pytest.mark.timeout(60)

CODES = {v: k for k, v in CODE_NUMBERS.items()}


def _session(server: Any) -> Wire:
    client = Wire(server.address)
    assert isinstance(client.hello(), m.Welcome)
    return client


def test_a_session_resets_steps_renders_and_closes_with_its_episode_books(started: Any) -> None:
    env = ScriptedEnv(length=2)
    server = started(EnvServer, env)
    with Wire(server.address) as client:
        welcome = client.hello()
        assert isinstance(welcome, m.Welcome) and welcome.service == "env"
        assert welcome.contract["observation_space"]["kind"] == "box"
        assert client.session.state is READY
        reset = client.request(m.Reset(seeds=[7], episode_ids=["ep-1"]))
        assert isinstance(reset, m.ResetReply) and obs_of(client.segments) == [0.0, 0.0, 0.0]
        assert env.seeds == [7]
        first = client.request(m.Step(action=[1]))
        assert isinstance(first, m.StepReply) and first.reward == 1.0 and not first.terminated
        assert obs_of(client.segments) == [0.5, 0.5, 0.5]
        second = client.request(m.Step(action=[0]))
        assert second.terminated and [r.episode_id for r in second.completed] == ["ep-1"]
        assert second.completed[0].step_count == 2 and second.completed[0].cumulative_reward == 2.0
        render = client.request(m.Render())
        assert isinstance(render, m.RenderReply) and render.shape == [4, 6, 3]
        client.request(m.Reset(episode_ids=["ep-2"]))
        client.request(m.Step(action=[1]))
        closed = client.request(m.Close())
        assert isinstance(closed, m.CloseReply)
        assert [(r.episode_id, r.step_count, r.truncated) for r in closed.final_episodes] == [
            ("ep-2", 1, True)
        ]
        assert client.closed_by_server()
    assert env.actions == [1, 0, 1]


def test_ping_before_a_handshake_says_ready_then_busy_while_another_client_holds_the_session(
    started: Any,
) -> None:
    server = started(EnvServer, ScriptedEnv())
    with Wire(server.address) as probe:
        pong = probe.request(m.Ping())
        assert isinstance(pong, m.Pong) and pong.state == "ready" and pong.service == "env"
        with _session(server):
            assert probe.request(m.Ping()).state == "busy"
            with Wire(server.address) as second:
                busy = second.hello()
                assert isinstance(busy, m.Busy) and "already has an active session" in busy.message
                assert second.closed_by_server()
        # the first client left: the session is free again
        for _ in range(100):
            if probe.request(m.Ping()).state == "ready":
                break
            threading.Event().wait(0.01)
        assert probe.request(m.Ping()).state == "ready"


def test_a_step_before_reset_is_refused_and_the_session_goes_on(started: Any) -> None:
    env = ScriptedEnv()
    server = started(EnvServer, env)
    with _session(server) as client:
        err = client.request(m.Step(action=[1]))
        assert isinstance(err, m.Error) and CODES[err.code] == "NOT_READY" and err.recoverable
        err = client.request(m.Render())
        assert CODES[err.code] == "NOT_READY"
        client.request(m.Reset())
        assert isinstance(client.request(m.Step(action=[1])), m.StepReply)
    assert env.actions == [1]


def test_an_invalid_action_is_a_recoverable_error(started: Any) -> None:
    server = started(EnvServer, ScriptedEnv())
    with _session(server) as client:
        client.request(m.Reset())
        err = client.request(m.Step(action=[5]))
        assert isinstance(err, m.Error) and CODES[err.code] == "INVALID_ACTION" and err.recoverable
        err = client.request(m.Render(env_index=3))
        assert CODES[err.code] == "INVALID_ACTION" and "env_index" in err.message
        assert isinstance(client.request(m.Step(action=[0])), m.StepReply)


def test_an_env_that_raises_ends_only_that_session(started: Any) -> None:
    env = ScriptedEnv()
    server = started(EnvServer, env)
    with _session(server) as client:
        client.request(m.Reset())
        env.fail_step = ZeroDivisionError("the env divided by zero")
        err = client.request(m.Step(action=[1]))
        assert isinstance(err, m.Error) and CODES[err.code] == "INTERNAL" and not err.recoverable
        assert "ZeroDivisionError: the env divided by zero" in err.message
        assert client.closed_by_server()
    env.fail_step = None
    with _session(server) as again:  # the server serves the next client, with a fresh session
        assert CODES[again.request(m.Step(action=[1])).code] == "NOT_READY"
        again.request(m.Reset())
        assert isinstance(again.request(m.Step(action=[1])), m.StepReply)


def test_a_request_before_hello_is_a_protocol_error_and_the_server_survives(started: Any) -> None:
    server = started(EnvServer, ScriptedEnv())
    with Wire(server.address) as rude:
        rude.send_bytes(frame_bytes(m.Reset(), 1))
        err = rude.read_frame()
        assert (
            isinstance(err, m.Error)
            and CODES[err.code] == "PROTOCOL"
            and "not allowed" in err.message
        )
        assert rude.closed_by_server()
    with Wire(server.address) as junk:
        junk.send_bytes(b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
        err = junk.read_frame()
        assert err is None or CODES[err.code] == "PROTOCOL"
        assert junk.closed_by_server()
    with Wire(
        server.address
    ) as huge:  # a prefix announcing a body far over the pre-handshake limit
        huge.send_bytes(PREFIX.pack(MAGIC, VERSION, m.Hello.KIND, 1, 2**31, 0, 2**40))
        assert huge.closed_by_server()
    with _session(server) as client:
        client.request(m.Reset())
        assert isinstance(client.request(m.Step(action=[0])), m.StepReply)


def test_a_hello_from_another_generation_or_for_another_service_is_incompatible(
    started: Any,
) -> None:
    server = started(EnvServer, ScriptedEnv())
    with Wire(server.address) as client:
        answer = client.hello(service="model")
        assert isinstance(answer, m.Incompatible) and "serves the env service" in answer.message
        assert client.closed_by_server()
    with Wire(server.address) as client:
        hello = handshake.make_hello("old", None)
        old = m.Hello(generation="rlmesh/0", peer=hello.peer, editions=hello.editions)
        answer = client.request(old)
        assert isinstance(answer, m.Incompatible) and "protocol generation" in answer.message
    with _session(server):
        pass


def test_pipelined_requests_are_answered_in_order(started: Any) -> None:
    env = ScriptedEnv(length=10)
    server = started(EnvServer, env)
    with Wire(server.address) as client:
        hello = handshake.make_hello("pipe", None)
        client.send_bytes(
            frame_bytes(hello, 1)
            + frame_bytes(m.Reset(), 2)
            + frame_bytes(m.Step(action=[1]), 3)
            + frame_bytes(m.Step(action=[0]), 4)
        )
        kinds = [type(client.read_frame()).__name__ for _ in range(4)]
        assert kinds == ["Welcome", "ResetReply", "StepReply", "StepReply"]
    assert env.actions == [1, 0]


def test_remote_shutdown_is_refused_by_default_and_stops_the_server_when_allowed(
    started: Any,
) -> None:
    server = started(EnvServer, ScriptedEnv())
    with Wire(server.address) as client:
        reply = client.request(m.Shutdown(reason="please"))
        assert (
            isinstance(reply, m.ShutdownReply)
            and not reply.accepted
            and "disabled" in reply.message
        )
    assert not server.wait(0.05)
    allowed = started(EnvServer, ScriptedEnv(), options=ServeOptions(allow_remote_shutdown=True))
    with _session(allowed) as client:
        reply = client.request(m.Shutdown(reason="maintenance"))
        assert reply.accepted and reply.message == "shutdown accepted: maintenance"
    assert allowed.wait(10.0)
    assert allowed.stop_reason == "remote shutdown: maintenance"


def test_remote_shutdown_can_be_enabled_from_the_environment(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMESH_ALLOW_REMOTE_SHUTDOWN", "true")
    server = started(EnvServer, ScriptedEnv())
    with Wire(server.address) as client:
        reply = client.request(m.Shutdown(reason=""))
        assert reply.accepted and reply.message == "shutdown accepted"
    assert server.wait(10.0) and server.stop_reason == "remote shutdown"


def test_an_idle_server_stops_after_its_idle_timeout(started: Any) -> None:
    env = ScriptedEnv()
    server = started(EnvServer, env, options=ServeOptions(idle_timeout_seconds=0.1))
    assert server.wait(10.0)
    assert server.stop_reason == "idle timeout" and env.closed == 1


def test_configure_accepts_an_edition_and_a_bad_one_ends_the_session(started: Any) -> None:
    server = started(EnvServer, ScriptedEnv())
    with _session(server) as client:
        ok = client.request(m.Configure(edition=""))
        assert isinstance(ok, m.ConfigureReply) and ok.edition == ""
        bad = client.request(m.Configure(edition="not an edition"))
        assert (
            isinstance(bad, m.Error) and CODES[bad.code] == "INVALID_ACTION" and not bad.recoverable
        )
        assert client.closed_by_server()


def test_a_request_past_its_timeout_gets_TIMEOUT(started: Any) -> None:
    env = ScriptedEnv(length=100)
    server = started(EnvServer, env)
    with _session(server) as client:
        client.request(m.Reset())
        env.release = threading.Event()
        timer = threading.Timer(0.05, env.release.set)
        timer.start()
        try:
            err = client.request(m.Step(action=[1], timeout_ms=1))
        finally:
            timer.cancel()
        assert (
            isinstance(err, m.Error)
            and CODES[err.code] == "TIMEOUT"
            and "env.step timed out after 1ms" in err.message
        )
        env.release = None
        assert isinstance(client.request(m.Step(action=[1])), m.StepReply)


def test_a_reset_past_its_timeout_gets_TIMEOUT_through_the_general_path(started: Any) -> None:
    class SlowReset(ScriptedEnv):
        def reset(self, *, seed: Any = None, options: Any = None) -> Any:
            threading.Event().wait(0.05)
            return super().reset(seed=seed, options=options)

    server = started(EnvServer, SlowReset())
    with _session(server) as client:
        err = client.request(m.Reset(timeout_ms=1))
        assert CODES[err.code] == "TIMEOUT" and "env.reset timed out" in err.message


def test_a_reply_over_the_frame_limit_is_a_fatal_error_naming_the_limit(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(frames.MAX_FRAME_BYTES_ENV, str(64 * 1024))

    class Big(ScriptedEnv):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = __import__("gymnasium").spaces.Box(
                -1.0, 1.0, (40_000,), np.float32
            )

        def reset(self, *, seed: Any = None, options: Any = None) -> Any:
            return np.zeros(40_000, np.float32), {}

    server = started(EnvServer, Big())
    with _session(server) as client:
        err = client.request(m.Reset())
        assert isinstance(err, m.Error) and not err.recoverable
        assert (
            "over the frame limit of 65536 bytes" in err.message
            and frames.MAX_FRAME_BYTES_ENV in err.message
        )
        assert client.closed_by_server()


def test_an_observation_outside_the_space_is_refused_under_strict(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "strict")
    env = ScriptedEnv()
    server = started(EnvServer, env)
    with _session(server) as client:
        client.request(m.Reset())
        env.obs = np.array([5.0, 0.0, 0.0], np.float32)
        err = client.request(m.Step(action=[1]))
        assert isinstance(err, m.Error) and not err.recoverable and "observation" in err.message


def test_a_client_that_leaves_mid_session_ends_the_episode_and_frees_the_endpoint(
    started: Any,
) -> None:
    env = ScriptedEnv(length=10)
    server = started(EnvServer, env)
    client = _session(server)
    client.request(m.Reset())
    client.request(m.Step(action=[1]))
    client.close()
    with Wire(server.address) as probe:
        for _ in range(200):
            if probe.request(m.Ping()).state == "ready":
                break
            threading.Event().wait(0.01)
        assert probe.request(m.Ping()).state == "ready"
    with _session(server) as again:
        assert CODES[again.request(m.Step(action=[1])).code] == "NOT_READY"  # nothing carries over
