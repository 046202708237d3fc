"""A failed ``render()`` drops that camera with one warning naming the cause and the fix; the run goes on.

CartPole cannot render without pygame (``DependencyNotInstalled``). Served, that failure
used to end the session (``SessionClosed: ... render failed``) and abort a recorded or
watched eval; local, the recorder said only that the camera "never produced a frame".
"""

from __future__ import annotations

import socket
import warnings
from typing import Any

import pytest
from signal_envs import PygameMissingEnv

import rlmesh
from conftest import require
from rlmesh.errors import EnvironmentException
from rlmesh.numpy import RemoteEnv
from rlmesh.recorder import Recorder

pytestmark = pytest.mark.slow  # video encoding, a viewer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recorded(env: Any) -> tuple[Any, list[str], Recorder]:
    require("av", "video recording")
    rec = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rlmesh.run(
            rlmesh.RANDOM_SAMPLE, env, seeds=[0, 1, 2], hooks=rec.capture(model="m", env="e")
        )
    return result, [str(w.message) for w in caught if "recorder" in str(w.message)], rec


def assert_one_warning_with_cause_and_fix(messages: list[str]) -> None:
    assert len(messages) == 1, messages
    (text,) = messages
    assert "camera 'render' disabled for the rest of the run" in text
    assert "DependencyNotInstalled: pygame is not installed" in text  # the cause
    assert 'pip install "rlmesh-py[render]"' in text and "cameras=[]" in text  # the fix


def test_a_served_env_whose_render_fails_is_recorded_without_its_camera(serve: Any) -> None:
    env = PygameMissingEnv()
    server = serve(env)
    result, messages, rec = recorded(server.address)
    with rec:
        assert [e.steps for e in result.episodes] == [10, 10, 10]  # the eval ran to the end
        assert all("media" not in e for e in rec.to_dict()["workloads"][0]["episodes"])
    assert_one_warning_with_cause_and_fix(messages)
    assert env.renders == 1  # given up at once: a missing package does not come back


def test_a_local_env_whose_render_fails_names_the_cause() -> None:
    env = PygameMissingEnv()
    result, messages, rec = recorded(env)
    rec.close()
    assert len(result.episodes) == 3
    assert_one_warning_with_cause_and_fix(messages)
    assert env.renders == 1


def test_a_failed_render_leaves_the_served_session_usable(serve: Any) -> None:
    server = serve(PygameMissingEnv())
    with RemoteEnv(server.address) as env:
        env.reset(seed=0)
        with pytest.raises(EnvironmentException, match="render failed: DependencyNotInstalled"):
            env.render()
        obs, reward, *_ = env.step(0)  # the session lives
        assert reward == 1.0 and obs.shape == (2,)


def test_a_watched_served_env_whose_render_fails_runs_to_the_end(serve: Any) -> None:
    require("aiohttp", "the http viewer")
    server = serve(PygameMissingEnv())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rlmesh.run(
            rlmesh.RANDOM_SAMPLE, server.address, seeds=[0, 1], view=f"http:{free_port()}"
        )
    assert [e.steps for e in result.episodes] == [10, 10]
    (text,) = [str(w.message) for w in caught if "rlmesh view: disabled" in str(w.message)]
    assert "DependencyNotInstalled" in text and "rlmesh-py[render]" in text
