"""An env given as a string means the same with and without ``workers=`` (issue 39 item 4).

A string spelled as an address (``host:port``, ``tcp://``, ``unix://``, ``[v6]:port``) is
dialed, always; any other string is a Gymnasium id made in this process (or in each
worker), and a string that is neither is refused in one line naming both choices.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import require

gym = require("gymnasium")

import rlmesh  # noqa: E402
from rlmesh.errors import InvalidEnvTarget, UnknownEnvId  # noqa: E402
from rlmesh.eval._targets import classify_string  # noqa: E402
from rlmesh.transport.address import looks_like_address  # noqa: E402


def first_action(obs: Any) -> int:
    return 0


def test_a_gymnasium_id_runs_in_this_process_like_the_env_it_names() -> None:
    by_id = rlmesh.run(rlmesh.RANDOM_SAMPLE, "CartPole-v1", seeds=[0, 1, 2])
    by_env = rlmesh.run(rlmesh.RANDOM_SAMPLE, gym.make("CartPole-v1"), seeds=[0, 1, 2])
    assert [e.steps for e in by_id.episodes] == [e.steps for e in by_env.episodes]
    assert [e.seed for e in by_id.episodes] == [0, 1, 2]


def test_a_session_on_a_gymnasium_id_makes_the_env_and_closes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    closed: list[Any] = []
    monkeypatch.setattr(CartPoleEnv, "close", lambda self: closed.append(self))
    with rlmesh.session(first_action, "CartPole-v1") as sess:
        obs, _ = sess.reset(seed=3)
        assert obs.shape == (4,) and sess.contract.id == "CartPole-v1"
        assert closed == []
    assert len(closed) == 1  # the session made it, so the session closed it


def test_a_namespaced_id_is_found_through_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:8]
    module, env_id = f"acmestr{tag}", f"AcmeStr{tag}/Reach-v0"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            import gymnasium as gym
            gym.register(id={env_id!r}, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert env_id not in gym.registry
        result = rlmesh.run(rlmesh.RANDOM_SAMPLE, env_id, seeds=[5])
        assert result.num_episodes == 1 and result.episodes[0].steps > 0
        assert (
            module in sys.modules
        )  # ensure_registered imported the package named after the namespace
    finally:
        gym.registry.pop(env_id, None)
        sys.modules.pop(module, None)


@pytest.mark.parametrize("workers", [None, 2])
def test_a_string_that_is_neither_is_refused_in_one_line_naming_both_choices(
    workers: int | None,
) -> None:
    with pytest.raises(InvalidEnvTarget) as info:
        rlmesh.run(rlmesh.RANDOM_SAMPLE, "CartPol-v1", seeds=[0], workers=workers)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "env 'CartPol-v1' is neither an address (host:port, tcp://host:port or unix:///path) "
        "nor a registered Gymnasium id (no installed package registers it; did you mean "
        "'CartPole-v1'"
    )
    assert message.endswith(
        "pass a served env's address, or a Gymnasium id such as 'CartPole-v1' (a namespaced id "
        "needs its package installed, or Gymnasium's 'module:EnvId' spelling)"
    )
    # still what callers caught before: a ValueError (and a LookupError, as UnknownEnvId)
    assert isinstance(info.value, ValueError) and isinstance(info.value, UnknownEnvId)
    assert info.value.env_id == "CartPol-v1"


def test_a_module_colon_id_with_no_such_module_is_refused_the_same_way() -> None:
    with pytest.raises(
        ValueError, match=r"nor a registered Gymnasium id \(ModuleNotFoundError: .*no_such_mod"
    ):
        rlmesh.session(first_action, "no_such_mod:Thing-v0")


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1:5555",
        "localhost:5555",
        "my-host.example:80",
        "[::1]:5555",
        "tcp://127.0.0.1:5555",
        "unix:///tmp/env.sock",
        "unix://relative.sock",
        "5555",
    ],
)
def test_every_address_form_is_an_address_never_an_id(text: str) -> None:
    assert looks_like_address(text)
    assert classify_string(text) == "address"


@pytest.mark.parametrize(
    "text", ["CartPole-v1", "ALE/Pong-v5", "Meta-World/MT1", "metaworld:Meta-World/MT1"]
)
def test_gymnasium_id_spellings_are_not_addresses(text: str) -> None:
    assert not looks_like_address(text)


@pytest.mark.parametrize("form", ["host:port", "tcp", "localhost", "unix"])
def test_every_address_form_still_dials(serve: Any, form: str) -> None:
    if form == "unix":
        server = serve(gym.make("CartPole-v1"), transport="unix")
        address = server.address
        assert address.startswith("unix://")
    else:
        server = serve(gym.make("CartPole-v1"))
        port = int(server.address.rsplit(":", 1)[1])
        address = {
            "host:port": f"127.0.0.1:{port}",
            "tcp": f"tcp://127.0.0.1:{port}",
            "localhost": f"localhost:{port}",
        }[form]
    result = rlmesh.run(first_action, address, seeds=[0, 1])
    local = rlmesh.run(first_action, gym.make("CartPole-v1"), seeds=[0, 1])
    assert [e.steps for e in result.episodes] == [e.steps for e in local.episodes]


def test_a_gymnasium_id_watched_by_a_viewer_is_made_to_render_frames() -> None:
    from rlmesh.eval._targets import open_target

    for render, mode in ((False, None), (True, "rgb_array")):
        conn = open_target("CartPole-v1", "gymid", render=render)
        try:
            assert conn.env.render_mode == mode and conn.built and not conn.remote
        finally:
            conn.close(close_env=False)
