"""Distributed evaluation on a simulated 3-node Ray cluster (``ray.cluster_utils.Cluster``, loopback).

The last test removes a node mid-run, so it stays last in this module (the cluster is
module-scoped).
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import rlmesh
from conftest import require

pytestmark = pytest.mark.ray

cloudpickle = require("cloudpickle")
require("gymnasium")
from test_distributed_ray import Walk, key, sign_policy  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules["test_distributed_ray"])
cloudpickle.register_pickle_by_value(sys.modules[__name__])

THREE = rlmesh.Workers(n=3, backend="ray")


def read_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class NodeWalk(Walk):
    """A :class:`Walk` that knows its Ray node: the first reset of each worker writes the node's
    id to ``nodes`` and waits (bounded) until ``n`` nodes have; on node ``hang`` every step
    waits (bounded), so that node's worker is mid-episode whenever the node is removed."""

    def __init__(self, *, nodes: str, n: int, hang: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.barrier: tuple[str, int] | None = (nodes, n)
        self.hang = hang

    @staticmethod
    def node() -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        if self.barrier is not None:
            path, n = self.barrier
            self.barrier = None
            with open(path, "a") as fh:
                fh.write(self.node() + "\n")
            deadline = time.monotonic() + 60
            while len(set(read_lines(Path(path)))) < n and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.node() == self.hang:
            time.sleep(60)  # until the node is removed (bounded all the same)
        return super().step(action)


def test_a_node_removed_mid_run_has_its_episode_rerun_elsewhere(
    ray_cluster3: Any, tmp_path: Path
) -> None:
    cluster = ray_cluster3
    victim = next(iter(cluster.worker_nodes))  # not the head
    removed: list[bool] = []

    class RemoveANode(rlmesh.RunHooks):
        def on_episode_end(self, result: Any) -> None:
            if not removed:  # every worker has started (the barrier); the victim's hangs
                removed.append(True)
                cluster.remove_node(victim)

    seeds = list(range(12))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    many = rlmesh.run(
        sign_policy,
        functools.partial(NodeWalk, nodes=str(tmp_path / "nodes"), n=3, hang=victim.node_id),
        seeds=seeds,
        workers=THREE,
        hooks=RemoveANode(),
    )
    assert removed
    assert key(many) == key(one)
    assert many.retries, "the removed node's worker held an episode: it must have been re-run"
    assert all("lost" in r.reason for r in many.retries)
    assert len({w.node for w in many.workers}) == 3
