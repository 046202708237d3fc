"""``SpaceQuery`` / ``SpaceReply``: golden bytes, the session table, the server's answers.

These two messages are Python's alone (the Rust crate never serves an opaque space),
so their golden bytes live here rather than in the shared ``tests/vectors/frames.txt``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from test_session_pair import Pair

from rlmesh._contract import EnvContract
from rlmesh.serve._driver import RequestFailed
from rlmesh.serve._opaque import answer_space_query
from rlmesh.wire import messages as m
from rlmesh.wire.messages import encode_message
from rlmesh.wire.session import LEGAL, READY, REPLIES
from rlmesh.wire.space_query import SpaceQuery, SpaceReply

GOLDEN = [
    (
        SpaceQuery(space="observation", path=["mission"], op="sample", seed=7),
        3,
        "524d010c030000002000000000000000200000000000000096ab6f62736572766174696f6e91a76d69737369"
        "6f6ea673616d706c65c00700",
    ),
    (
        SpaceReply(value="go to the goal"),
        3,
        "524d018c030000001100000000000000110000000000000092ae676f20746f2074686520676f616cc2",
    ),
    (
        SpaceQuery(space="observation", path=["mission"], op="contains", value="go"),
        4,
        "524d010c040000002400000000000000240000000000000096ab6f62736572766174696f6e91a76d69737369"
        "6f6ea8636f6e7461696e73a2676fc000",
    ),
    (SpaceReply(member=True), 4, "524d018c040000000300000000000000030000000000000092c0c3"),
]


@pytest.mark.parametrize(("msg", "rid", "hexdump"), GOLDEN)
def test_space_messages_keep_their_exact_bytes(msg: Any, rid: int, hexdump: str) -> None:
    raw = b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(msg, rid))
    assert raw.hex() == hexdump


def test_a_space_query_is_legal_once_ready_and_answered_by_a_space_reply() -> None:
    assert SpaceQuery.KIND in LEGAL[READY] and REPLIES[SpaceQuery.KIND] == {SpaceReply.KIND}
    pair = Pair()
    pair.handshake()
    query, _ = pair.request(SpaceQuery(space="action", path=[0, "k"], op="contains", value=[1]))
    assert isinstance(query, SpaceQuery) and query.path == [0, "k"] and query.value == [1]
    reply, _ = pair.reply(SpaceReply(member=True))
    assert isinstance(reply, SpaceReply) and reply.member is True


class Words(gym.spaces.Space):  # type: ignore[type-arg]
    def __init__(self) -> None:
        super().__init__(dtype=str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return "go"

    def contains(self, x: Any) -> bool:
        return x == "go"


def contract() -> EnvContract:
    from rlmesh.spaces._gym import as_spec

    obs = gym.spaces.Dict({"n": gym.spaces.Discrete(2), "w": Words()})
    return EnvContract(
        "words", as_spec(obs, opaque=True), as_spec(gym.spaces.Discrete(2), opaque=True)
    )


def test_the_server_answers_with_the_env_s_own_space() -> None:
    c = contract()
    reply, segments = answer_space_query(c, SpaceQuery("observation", ["w"], "sample", seed=1))
    assert reply.value == "go" and segments == []
    assert answer_space_query(c, SpaceQuery("observation", ["w"], "contains", "go"))[0].member
    assert not answer_space_query(c, SpaceQuery("observation", ["w"], "contains", "no"))[0].member


@pytest.mark.parametrize(
    ("query", "words"),
    [
        (SpaceQuery("reward", ["w"], "sample"), "space must be 'observation' or 'action'"),
        (SpaceQuery("observation", ["zz"], "sample"), "has no opaque space at ['zz']"),
        (SpaceQuery("observation", ["n"], "sample"), "has no opaque space at ['n']"),
        (SpaceQuery("action", [], "sample"), "has no opaque space at []"),
        (SpaceQuery("observation", ["w"], "flip"), "op must be 'sample' or 'contains'"),
    ],
)
def test_questions_the_server_cannot_answer_fail_that_request_only(
    query: SpaceQuery, words: str
) -> None:
    with pytest.raises(RequestFailed) as caught:
        answer_space_query(contract(), query)
    assert caught.value.recoverable and caught.value.code == "INVALID_ACTION"
    assert words in str(caught.value)


def test_message_kinds_do_not_collide() -> None:
    assert m.KINDS[SpaceQuery.KIND] is SpaceQuery and m.KINDS[SpaceReply.KIND] is SpaceReply
