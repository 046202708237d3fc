"""A server refuses, when it is built, a contract its own clients would refuse at handshake.

The client checks every contract it reads (elements per space, lanes, bytes, before
anything is built). A server whose env declares more used to serve it anyway, and every
client then failed with "the server runs an incompatible rlmesh -- upgrade one side"
although both sides ran the same version.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    no_threads_left_fixture,
    short_dir_fixture,
    started_fixture,
)

from rlmesh._contract import EnvContract, check_servable
from rlmesh.serve import EnvServer
from rlmesh.spaces import from_gymnasium_space
from rlmesh.spaces._spec import MAX_SPACE_ELEMENTS

pytestmark = pytest.mark.timeout(60)


class Declares(ScriptedEnv):
    """An env with the observation space it is given (never stepped here)."""

    def __init__(self, space: Any) -> None:
        super().__init__()
        self.observation_space = space


OVER = MAX_SPACE_ELEMENTS + 1
CASES = {
    # a MultiBinary holds no bound arrays: a space over the limit costs nothing to build here
    "one space over the elements limit": (
        gym.spaces.MultiBinary(OVER),
        rf"the env's observation_space is a multi_binary of shape \[{OVER}\] \({OVER} elements\), "
        rf"over the limit of {MAX_SPACE_ELEMENTS} elements per space a client accepts \(MAX_SPACE_ELEMENTS\)",
    ),
    "a nested leaf over it, named by its path": (
        gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "cam": gym.spaces.MultiBinary([OVER, 1])}),
        r"the env's observation_space\['cam'\] is a multi_binary",
    ),
    "a text longer than it": (
        gym.spaces.Text(max_length=OVER),
        rf"observation_space is a text of max_length {OVER}, over the limit",
    ),
    "every space within it, but over a GiB together": (
        gym.spaces.Dict({f"c{i}": gym.spaces.MultiBinary(MAX_SPACE_ELEMENTS) for i in range(17)}),
        r"the env declares \d+ bytes for one observation plus one action .* over the limit of "
        r"\d+ bytes .*; a client refuses such a contract at handshake",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_server_refuses_what_its_clients_would_refuse(short_dir: Any, case: str) -> None:
    space, words = CASES[case]
    env = Declares(space)
    with pytest.raises(ValueError, match=words):
        EnvServer(env, f"unix://{short_dir}/x.sock")
    # the check is exactly the client's: the same contract read from a peer is refused too
    contract = EnvContract(
        "Declares-v0",
        from_gymnasium_space(space).spec,
        from_gymnasium_space(env.action_space).spec,
    )
    with pytest.raises(ValueError, match="the limit"):
        EnvContract.from_dict(contract.to_dict())


def test_a_space_at_the_limit_serves(short_dir: Any) -> None:
    server = EnvServer(
        Declares(gym.spaces.MultiBinary(MAX_SPACE_ELEMENTS)), f"unix://{short_dir}/y.sock"
    )
    try:
        contract = server.env_contract
        check_servable(contract)
        assert EnvContract.from_dict(contract.to_dict()) == contract  # a client reads it
    finally:
        server.shutdown()
