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

THREE = rlmesh.Workers(n=3, backend="ray")


def read_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_three_nodes_each_run_a_worker_with_the_results_of_one_process(ray_cluster3: Any) -> None:
    seeds = list(range(12))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    many = rlmesh.run(
        sign_policy, functools.partial(Walk, sleep_s=0.03), seeds=seeds, workers=THREE
    )
    assert key(many) == key(one)
    assert len({w.node for w in many.workers}) == 3  # one worker per node (1 CPU each)


def test_a_node_removed_mid_run_has_its_episode_rerun_elsewhere(
    ray_cluster3: Any, tmp_path: Path
) -> None:
    cluster = ray_cluster3
    victim = next(iter(cluster.worker_nodes))  # not the head
    nodes = tmp_path / "nodes"  # each episode's reset writes the id of the node it runs on
    removed: list[bool] = []

    class RemoveANode(rlmesh.RunHooks):
        """Removes the victim node once its worker runs an episode (an actor on a loaded
        machine may still be starting when the first episode ends elsewhere)."""

        def on_episode_end(self, result: Any) -> None:
            if removed:
                return
            deadline = time.monotonic() + 120
            while victim.node_id not in read_lines(nodes) and time.monotonic() < deadline:
                time.sleep(0.02)
            removed.append(True)
            cluster.remove_node(victim)

    seeds = list(range(12))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    many = rlmesh.run(
        sign_policy,
        functools.partial(Walk, sleep_s=0.03, nodes=str(nodes)),
        seeds=seeds,
        workers=THREE,
        hooks=RemoveANode(),
    )
    assert removed
    assert key(many) == key(one)
    assert many.retries, "the removed node's worker held an episode: it must have been re-run"
    assert all("lost" in r.reason for r in many.retries)
    assert len({w.node for w in many.workers}) == 3
