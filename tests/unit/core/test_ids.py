"""One home for episode ids (issue 23 item 5): the two formats the spec fixes, by path."""

from __future__ import annotations

import re

from rlmesh._ids import new_episode_id, new_local_episode_id, uuid7

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_runtime_episode_ids_are_uuid7_strings() -> None:
    ids = [new_episode_id() for _ in range(200)]
    assert all(UUID7.fullmatch(i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    assert UUID7.fullmatch(uuid7())


def test_local_episode_ids_are_uuid4_hex() -> None:
    ids = [new_local_episode_id() for _ in range(200)]
    assert all(re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
