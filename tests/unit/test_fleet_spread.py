"""EnvFleet's default placement: actors round robin over the nodes that can host one.

Ray's own ``"SPREAD"`` is best effort (three actors created together were seen on one
node of a 3-node cluster); a fleet pins each actor softly to a node in turn instead.
Only the placement is computed here: no Ray is started.
"""

from __future__ import annotations

from typing import Any

from conftest import require

require("ray", "the rlmesh[ray] extra")

from rlmesh.ray._fleet import spread_over_nodes  # noqa: E402


class Nodes:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def node(node_id: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": 1.0, **resources}}


def placed(placements: list[dict[str, Any]] | None) -> list[tuple[str, bool]]:
    assert placements is not None
    return [(p["scheduling_strategy"].node_id, p["scheduling_strategy"].soft) for p in placements]


def test_actors_take_the_nodes_in_turn_with_a_soft_affinity() -> None:
    ray = Nodes([node("cc" * 28), node("aa" * 28), node("bb" * 28)])
    got = placed(spread_over_nodes(ray, 4, {}))
    assert got == [("aa" * 28, True), ("bb" * 28, True), ("cc" * 28, True), ("aa" * 28, True)]


def test_dead_nodes_and_nodes_that_cannot_host_an_actor_are_skipped() -> None:
    ray = Nodes(
        [
            node("aa" * 28, GPU=1.0),
            node("bb" * 28, alive=False, GPU=1.0),
            node("cc" * 28),  # no GPU
            node("dd" * 28, GPU=2.0),
        ]
    )
    got = placed(spread_over_nodes(ray, 3, {"num_gpus": 0.5}))
    assert [n for n, _ in got] == ["aa" * 28, "dd" * 28, "aa" * 28]


def test_one_node_leaves_placement_to_ray() -> None:
    assert spread_over_nodes(Nodes([node("aa" * 28)]), 3, {}) is None
    assert spread_over_nodes(Nodes([node("aa" * 28), node("bb" * 28, CPU=0.0)]), 3, {}) is None
