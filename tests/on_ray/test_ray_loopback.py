"""The Ray test harness itself: Ray sees only loopback, so no Ray test reaches another address."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.ray


def test_local_ray_advertises_only_loopback(ray_local: Any) -> None:
    nodes = ray_local.nodes()
    assert nodes, "ray.init() started no node"
    assert {node["NodeManagerAddress"] for node in nodes} == {"127.0.0.1"}

    @ray_local.remote
    def double(x: int) -> int:
        return 2 * x

    assert ray_local.get([double.remote(i) for i in range(4)]) == [0, 2, 4, 6]
