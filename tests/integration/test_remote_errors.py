"""Errors across the wire: recoverable vs fatal env failures, bad values, bad envs, bind failures.

Covers ERR-1..4/ERR-6, RENV-6, DEC-8 (``RecoverableEnvError``), DELTA-19 (a fatal
error ends the session, the server keeps serving), SRV-60 (actions are checked before
the env, observations before transport), CNF-4/INFO-4 (validation policy and
conformance warnings), VAL-14 (client-side structural check with the JSONPath),
ENVCALL-2/3 (legacy results), SRV-2/SRV-13 (bad envs at construction) and
SRV-5/DEC-10 (bind failures are ``BindFailed``, a ``ConnectionError``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from integration_envs import CountdownEnv, EchoEnv, FlakyEnv

import rlmesh
import rlmesh.numpy as rnp
import rlmesh.spaces as rs
from rlmesh.errors import BindFailed, InvalidAction, SessionClosed

pytestmark = pytest.mark.timeout(60)


# -- env failures (DEC-8, DELTA-19) -------------------------------------------------------------


def test_RecoverableEnvError_in_step_fails_one_request_and_the_session_keeps_working(serve):
    env = FlakyEnv()
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(rlmesh.EnvironmentException, match="try again") as info:
            client.step(1)
        exc = info.value
        assert exc.recoverable is True
        assert exc.op == "step"
        assert str(exc).startswith("[INTERNAL] step failed: RecoverableEnvError: ")
        obs, reward, *_ = client.step(0)
        assert reward == 1.0 and env.steps == 1
        with pytest.raises(rlmesh.EnvironmentException):
            client.step(1)
        client.step(0)
        assert env.steps == 2


def test_a_plain_exception_in_step_is_fatal_and_later_calls_raise_ConnectionError(serve):
    env = FlakyEnv()
    server = serve(env)
    client = rnp.RemoteEnv(server.address)
    client.reset()
    with pytest.raises(rlmesh.EnvironmentException) as info:
        client.step(2)
    assert str(info.value) == "[INTERNAL] step failed: RuntimeError: boom"  # ERR-2
    assert info.value.recoverable is False and info.value.code == "INTERNAL"
    for call in (lambda: client.step(0), lambda: client.reset(), lambda: client.render()):
        with pytest.raises(ConnectionError, match="connection closed") as closed:
            call()
        assert isinstance(closed.value, SessionClosed)
        assert "boom" in str(closed.value)  # DEC-7: names the original error
    client.close()  # still returns normally (DELTA-19)
    # the server keeps serving: a new client connects and resets
    with rnp.RemoteEnv(server.address) as again:
        again.reset()
        again.step(0)
    assert env.closed == 0


class _FailingResetEnv(CountdownEnv):
    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        raise KeyError("no scene loaded")


def test_an_exception_in_reset_reads_INTERNAL_reset_failed(serve):
    server = serve(_FailingResetEnv())
    with rnp.RemoteEnv(server.address) as client:
        with pytest.raises(
            rlmesh.EnvironmentException, match=r"^\[INTERNAL\] reset failed: KeyError: "
        ) as info:
            client.reset()
        assert info.value.op == "reset" and not info.value.recoverable


class _BadObsEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        return np.zeros(5, np.int64), 0.0, False, False, {}


def test_an_env_returning_a_bad_observation_is_a_fatal_INTERNAL_error(serve):
    server = serve(_BadObsEnv())
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(
            rlmesh.EnvironmentException, match=r"\[INTERNAL\] step failed: .*observation"
        ) as info:
            client.step(0)
        assert not info.value.recoverable
        assert "$" in str(info.value)  # the JSONPath of the offending leaf (CNF-5)
        with pytest.raises(ConnectionError):
            client.step(0)


class _BadInfoEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        obs, r, term, trunc, _ = super().step(action)
        return obs, r, term, trunc, {"handle": object()}


def test_an_info_value_the_metadata_codec_cannot_carry_is_fatal_and_names_sanitize_metadata(serve):
    server = serve(_BadInfoEnv())
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(rlmesh.EnvironmentException, match="sanitize_metadata"):
            client.step(0)


class _WrongArityEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        return np.zeros(1, np.int64), 0.0, False


def test_a_step_result_of_the_wrong_length_is_reported(serve):
    server = serve(_WrongArityEnv())
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(
            rlmesh.EnvironmentException,
            match="must return 4 legacy Gym values or 5 Gymnasium values, got 3",
        ):
            client.step(0)


class _LegacyEnv(CountdownEnv):
    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        return np.array([0], np.int64)  # a bare observation (old Gym)

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, r, done, _, _ = super().step(action)
        return obs, r, done, {"TimeLimit.truncated": bool(done)}


def test_legacy_gym_reset_and_4_tuple_step_results_are_normalized(serve):
    server = serve(_LegacyEnv(2))
    with rnp.RemoteEnv(server.address) as client:
        obs, info = client.reset()
        assert obs.tolist() == [0] and set(info) == {"episode_ids"}  # ENVCALL-2
        client.step(0)
        _, _, terminated, truncated, info = client.step(0)
        assert (terminated, truncated) == (False, True)  # ENVCALL-3: done + TimeLimit.truncated
        assert info["completed_episodes"] == 1


# -- invalid actions (VAL-14, SRV-60, CNF-4) ------------------------------------------------------


def test_an_invalid_action_is_rejected_client_side_with_a_ValueError_naming_the_JSONPath(serve):
    space = rs.Dict({"arm": rs.Box(-1.0, 1.0, (3,)), "mode": rs.Discrete(3)})
    env = EchoEnv(space)
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(ValueError, match=r"\$\.mode") as info:
            client.step({"arm": np.zeros(3, np.float32), "mode": 7})
        assert "7" in str(info.value)
        with pytest.raises(ValueError, match=r"\$\.arm"):
            client.step({"arm": np.zeros(4, np.float32), "mode": 0})
        with pytest.raises(KeyError, match="mode"):
            client.step({"arm": np.zeros(3, np.float32)})
        assert env.actions == []  # nothing reached the env
        client.step({"arm": np.zeros(3, np.float32), "mode": 1})  # the session is intact
        assert len(env.actions) == 1


def test_a_discrete_action_out_of_range_is_a_ValueError_before_anything_is_sent(serve):
    env = FlakyEnv()
    server = serve(env)
    with rlmesh.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(ValueError, match=r"\$"):
            client.step(5)
        with pytest.raises(ValueError, match="integer"):
            client.step(1.5)
        client.step(0)
        assert env.steps == 1


def test_a_range_deviation_is_INVALID_ACTION_under_the_strict_policy(serve, monkeypatch):
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "strict")
    env = EchoEnv(rs.Box(-1.0, 1.0, (2,)))
    server = serve(env)  # CNF-4: the policy is read when the server is built
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        with pytest.raises(InvalidAction, match=r"out of range at \$") as info:
            client.step(np.array([0.0, 5.0], np.float32))
        assert isinstance(info.value, ValueError) and info.value.recoverable
        assert env.actions == []  # SRV-60: never delivered
        client.step(np.array([0.0, 0.5], np.float32))
        assert len(env.actions) == 1


def test_a_range_deviation_warns_once_per_path_under_the_default_policy(serve, monkeypatch):
    monkeypatch.delenv("RLMESH_VALIDATION_POLICY", raising=False)
    env = EchoEnv(rs.Box(-1.0, 1.0, (2,)))
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        out = np.array([0.0, 5.0], np.float32)
        _, _, _, _, info = client.step(out)
        warnings = info["rlmesh.conformance.warning"]  # INFO-4
        kinds = sorted(w["kind"] for w in warnings)
        assert kinds == ["action", "observation"]  # the echoed obs is out of range too
        assert all(w["path"] == "$" for w in warnings)
        _, _, _, _, info = client.step(out)
        assert "rlmesh.conformance.warning" not in info  # once per (kind, path) per session
    with rnp.RemoteEnv(server.address) as client:  # OPP-5: the dedup is per session
        client.reset()
        _, _, _, _, info = client.step(out)
        assert len(info["rlmesh.conformance.warning"]) == 2


# -- bad envs at construction (SRV-2, SRV-13) -----------------------------------------------------


class _BadMetadataEnv(CountdownEnv):
    metadata = {"render_modes": [], "handle": object()}


def test_env_metadata_the_codec_cannot_carry_is_a_TypeError_at_construction():
    with pytest.raises(TypeError, match="sanitize_metadata"):
        rlmesh.EnvServer(_BadMetadataEnv())


class _NoStep:
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, **kwargs: Any) -> Any:
        return 0, {}

    def close(self) -> None:
        pass


def test_an_env_without_step_is_a_TypeError_at_construction():
    with pytest.raises(TypeError, match="env must have a 'step' method"):
        rlmesh.EnvServer(_NoStep())


def test_an_unknown_autoreset_mode_is_a_ValueError_at_construction():
    vec = gym.vector.SyncVectorEnv([lambda: CountdownEnv(2)] * 2)
    vec.metadata = {**vec.metadata, "autoreset_mode": "Sometimes"}
    with pytest.raises(ValueError, match="autoreset_mode"):
        rlmesh.EnvServer(vec)


def test_an_empty_list_of_lanes_and_a_vector_lane_are_refused():
    with pytest.raises(ValueError, match="at least one environment"):
        rlmesh.EnvServer([])
    vec = gym.vector.SyncVectorEnv([lambda: CountdownEnv(2)] * 2)
    with pytest.raises(TypeError, match="lanes must be scalar environments"):
        rlmesh.EnvServer([CountdownEnv(2), vec])


# -- bind failures (SRV-5, DEC-10) -------------------------------------------------------------------


def test_binding_a_port_in_use_raises_BindFailed_a_ConnectionError(serve):
    server = serve(CountdownEnv(2))
    with pytest.raises(BindFailed, match="failed to bind tcp listener") as info:
        rlmesh.EnvServer(CountdownEnv(2), server.address)
    assert isinstance(info.value, ConnectionError)
    assert isinstance(info.value.__cause__, OSError)


def test_binding_a_unix_socket_in_a_missing_directory_raises_BindFailed(short_tmp: Path):
    with pytest.raises(BindFailed, match="failed to bind unix socket"):
        rlmesh.EnvServer(CountdownEnv(2), f"unix://{short_tmp}/missing/env.sock")


def test_binding_over_a_live_unix_socket_or_a_regular_file_is_refused(serve, short_tmp: Path):
    server = serve(CountdownEnv(2), "unix")
    with pytest.raises(BindFailed, match="another server is listening"):
        rlmesh.EnvServer(CountdownEnv(2), server.address)
    plain = short_tmp / "plain.txt"
    plain.write_text("not a socket")
    with pytest.raises(BindFailed, match="not a socket"):
        rlmesh.EnvServer(CountdownEnv(2), f"unix://{plain}")
    assert plain.read_text() == "not a socket"


def test_a_stale_unix_socket_file_is_replaced(short_tmp: Path):
    path = short_tmp / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens (ADR-4)
    server = rlmesh.EnvServer(CountdownEnv(2), f"unix://{path}").start()
    try:
        with rnp.RemoteEnv(server.address) as client:
            client.reset()
    finally:
        server.shutdown()


# -- pathological envs never take the server down (DESIGN "Errors are typed") ---------------------


class _CyclicInfoEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        obs, r, term, trunc, _ = super().step(action)
        info: dict[str, Any] = {}
        info["self"] = info
        return obs, r, term, trunc, info


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise ValueError("cannot print")


class _UnprintableErrorEnv(CountdownEnv):
    def step(self, action):  # type: ignore[no-untyped-def]
        raise _UnprintableError()


@pytest.mark.parametrize(
    ("env_cls", "message"),
    [
        (_CyclicInfoEnv, r"^\[INTERNAL\] step failed: info: metadata nests deeper than 64 levels"),
        (
            _UnprintableErrorEnv,
            r"^\[INTERNAL\] step failed: _UnprintableError: <unprintable exception>$",
        ),
    ],
    ids=["cyclic-info", "unprintable-exception"],
)
def test_a_pathological_env_ends_the_session_but_the_server_keeps_serving(serve, env_cls, message):
    server = serve(env_cls(5))
    with rnp.RemoteEnv(server.address, request_timeout_seconds=10) as client:
        client.reset()
        with pytest.raises(rlmesh.EnvironmentException, match=message) as info:
            client.step(0)
        assert info.value.recoverable is False
    assert server.stop_reason is None
    with rnp.RemoteEnv(server.address, connect_timeout_seconds=5) as again:
        again.reset()  # the serve loop survived
