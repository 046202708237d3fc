"""The token gate, its throttle, and the refusal to serve beyond loopback without a token (issue 36).

Pure: no sockets are opened (the exposure check happens before anything is bound).
"""

from __future__ import annotations

import hmac
import pickle
from pathlib import Path
from typing import Any

import pytest

from rlmesh import _token
from rlmesh._token import (
    FORGET_SECONDS,
    FREE_FAILURES,
    MAX_HOSTS,
    Gate,
    new_token,
    read_token_file,
    refusal_text,
    resolve_token,
    throttle_delay,
)
from rlmesh.errors import InsecureEndpoint
from rlmesh.serve import ServeOptions
from rlmesh.serve._auth import check_exposure
from rlmesh.transport import parse_bind_address


def test_the_gate_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(_token.hmac, "compare_digest", spy)
    gate = Gate("s3cret")
    assert gate.admits("s3cret") and not gate.admits("s3cre") and not gate.admits("")
    assert len(calls) == 3  # every comparison went through hmac.compare_digest
    assert Gate(None).admits("") and Gate(None).admits("anything")


def test_refusals_are_counted_and_throttled_per_host_after_the_free_ones() -> None:
    gate = Gate("t")
    now = 1000.0
    waits = [gate.refused("10.0.0.5", now)[0] for _ in range(FREE_FAILURES)]
    assert waits == [0.0] * FREE_FAILURES  # a typo is answered at once
    # then one after the other: each refusal to that host later than the one before
    due = [now + gate.refused("10.0.0.5", now)[0] for _ in range(4)]
    assert due == sorted(due) and len(set(due)) == 4
    assert due[0] - now == throttle_delay(FREE_FAILURES + 1)
    assert gate.refused("10.0.0.6", now) == (0.0, 1)  # another host is not slowed down
    assert gate.failures == FREE_FAILURES + 4 + 1


def test_the_throttle_is_bounded_and_forgets() -> None:
    assert [throttle_delay(n) for n in range(1, 12)] == [0, 0, 0, 1, 2, 4, 8, 16, 16, 16, 16]
    gate = Gate("t")
    for _ in range(10):
        gate.refused("h", 0.0)
    assert gate.refused("h", FORGET_SECONDS + 1.0) == (0.0, 1)  # quiet long enough: a fresh start
    for i in range(MAX_HOSTS + 50):
        gate.refused(f"10.1.{i // 256}.{i % 256}", 0.0)
    assert gate.tracked_hosts == MAX_HOSTS  # bounded books, however many hosts guess


def test_the_refusal_says_which_side_and_how_and_never_the_token() -> None:
    missing = refusal_text("", what="endpoint", throttled=False)
    wrong = refusal_text("hunter2", what="endpoint", throttled=True)
    assert "needs a token and the client sent none" in missing
    assert "is not this endpoint's" in wrong and "hunter2" not in wrong
    for text in (missing, wrong):
        assert "token=" in text and "RLMESH_TOKEN" in text and "--token-file" in text
    assert "slowly" in wrong


def test_tokens_come_from_the_argument_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    assert resolve_token(None) is None and resolve_token("") is None
    monkeypatch.setenv("RLMESH_TOKEN", "from-env")
    assert resolve_token(None) == "from-env"
    assert resolve_token("explicit") == "explicit"
    assert len({new_token() for _ in range(5)}) == 5
    with pytest.raises(ValueError, match="line break"):
        resolve_token("a\nb")
    with pytest.raises(TypeError):
        resolve_token(b"bytes")  # type: ignore[arg-type]


def test_token_files(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("s3cret\n")
    assert read_token_file(str(good)) == "s3cret"
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "two").write_text("a\nb\n")
    for name, words in (
        ("empty", "is empty"),
        ("two", "more than one line"),
        ("none", "cannot read"),
    ):
        with pytest.raises(ValueError, match=words):
            read_token_file(str(tmp_path / name))


def test_serve_options_carry_the_token_but_never_show_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    options = ServeOptions(token="s3cret", idle_timeout_seconds=5)
    assert options.token == "s3cret" and "s3cret" not in repr(options)
    again = pickle.loads(pickle.dumps(options))  # what session workers and Ray actors receive
    assert again.token == "s3cret" and again.idle_timeout_seconds == 5.0
    assert options.replace(metrics_address="9100").token == "s3cret"
    monkeypatch.setenv("RLMESH_TOKEN", "from-env")
    assert ServeOptions().token == "from-env"
    assert ServeOptions(token=None).replace().token == "from-env"
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        ServeOptions(tls_cert="c.pem")
    with pytest.raises(TypeError, match="no option"):
        options.replace(colour="red")


def test_serve_options_replace_keeps_every_option_and_repr_shows_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import inspect

    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    given: dict[str, object] = {
        "allow_remote_shutdown": True,
        "idle_timeout_seconds": 5.0,
        "drain_timeout_seconds": 2.0,
        "close_timeout_seconds": 3.0,
        "workflow_edition": "2026.06",
        "token": "s3cret",
        "insecure_no_auth": True,
        "tls_cert": "c.pem",
        "tls_key": "k.pem",
        "tls_client_ca": "ca.pem",
        "metrics_address": "9100",
    }
    assert set(given) == set(inspect.signature(ServeOptions).parameters)  # every option
    options = ServeOptions(**given)  # type: ignore[arg-type]
    again = options.replace()
    assert {name: getattr(again, name) for name in given} == given
    shown = repr(options)
    for name, value in given.items():
        assert (f"{name}={value!r}" in shown) is (name != "token")
    assert "token=<set>" in shown and "s3cret" not in shown


@pytest.mark.parametrize(
    "address", ["0.0.0.0:5555", "[::]:5555", "tcp://0.0.0.0:0", "tls://0.0.0.0:1", "192.0.2.7:1"]
)
def test_beyond_loopback_without_a_token_is_refused_before_binding(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    with pytest.raises(InsecureEndpoint, match="--token-file") as info:
        check_exposure(parse_bind_address(address), ServeOptions(), who="EnvServer")
    assert "--insecure-no-auth" in str(info.value)
    assert isinstance(info.value, ValueError)
    # a token, or the explicit opt-out, lets it through
    check_exposure(parse_bind_address(address), ServeOptions(token="t"), who="EnvServer")
    check_exposure(
        parse_bind_address(address), ServeOptions(insecure_no_auth=True), who="EnvServer"
    )


@pytest.mark.parametrize(
    "address", ["127.0.0.1:0", "localhost:0", "[::1]:0", "5555", "unix:///tmp/x.sock"]
)
def test_loopback_and_unix_sockets_need_no_token(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    check_exposure(parse_bind_address(address), ServeOptions(), who="EnvServer")


def test_an_env_server_refuses_before_it_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import rlmesh

    monkeypatch.delenv("RLMESH_TOKEN", raising=False)
    bound: list[Any] = []
    real_bind = socket.socket.bind
    monkeypatch.setattr(
        socket.socket, "bind", lambda self, a: bound.append(a) or real_bind(self, a)
    )
    env = _Tiny()
    with pytest.raises(InsecureEndpoint):
        rlmesh.EnvServer(env, "0.0.0.0:0")
    with pytest.raises(InsecureEndpoint):
        rlmesh.EnvServer("CartPole-v1", "0.0.0.0:0", sessions=2)
    assert bound == []  # nothing was bound: no remote traffic could have been accepted


class _Tiny:
    def __init__(self) -> None:
        import gymnasium as gym

        self.observation_space = gym.spaces.Discrete(2)
        self.action_space = gym.spaces.Discrete(2)
        self.metadata: dict[str, Any] = {}

    def reset(self, **kw: Any) -> Any:
        return 0, {}

    def step(self, a: Any) -> Any:
        return 0, 0.0, False, False, {}

    def close(self) -> None:
        pass
