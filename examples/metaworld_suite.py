"""Evaluate a policy on Meta-World's MT10 with one call, then the same from the shell.

    pip install ".[metaworld]"          # from a clone: Meta-World 3.x + MuJoCo
    python examples/metaworld_suite.py [--episodes 3] [--workers 2]

The scripted expert is Meta-World's own baseline (and the suite's self-check: >= 90 % on
each MT10 task). Put your model where ``"scripted"`` is: any ``rlmesh.run`` model, a
served model's ``rlmesh.RemoteModel(address)``, or a mapping ``task -> model``. The same
from the shell:

    rlmesh eval metaworld:scripted --suite metaworld:MT10 --episodes-per-task 3 --workers 2
"""

from __future__ import annotations

import argparse
import os

from rlmesh import suites


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="metaworld:MT10")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--max-episode-steps", type=int, default=None)
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")  # only matters for cameras on a headless machine

    def progress(task: suites.TaskResult) -> None:
        lo, hi = task.success_interval
        print(
            f"{task.task:26s} success {task.success_rate:5.0%}  [{lo:.2f}, {hi:.2f}]  {task.seconds:5.1f}s"
        )

    result = suites.run(
        "scripted",
        args.suite,
        episodes_per_task=args.episodes,
        workers=args.workers,
        max_episode_steps=args.max_episode_steps,
        on_task=progress,
    )
    print(result)
    print(f"{result.episodes_per_hour:,.0f} episodes/hour")


if __name__ == "__main__":  # workers import this module: keep the run under the guard
    main()
