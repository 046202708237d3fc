"""Evaluate an openpi-protocol policy server on a Meta-World task with rlmesh.

Any server that speaks openpi's WebSocket policy protocol works (pi0, pi0-FAST, pi0.5 behind
``openpi``'s ``serve_policy.py``, LeRobot's or IsaacLab-Arena's openpi-compatible servers,
or ``rlmesh serve-model --protocol openpi``). Without ``--url`` this script starts one itself:
Meta-World's scripted expert policy for the task, served on 127.0.0.1 with
``ModelServer(..., protocol="openpi")``, so it runs end to end on a laptop.

The env is ``rlmesh.suites.metaworld`` when this rlmesh has it (a Dict observation with the
state and the task's instruction, which becomes the ``prompt``), else
``gymnasium.make("Meta-World/MT1", env_name=TASK)`` (a flat float64[39] observation; the task
name is the prompt). Either way the policy server receives ``{"observation/state": float64[39],
"prompt": str}`` and answers ``{"actions": [H, 4]}``.

Run: ``python examples/openpi/eval_metaworld.py [--task reach-v3] [--episodes 5]
[--url ws://host:port] [--execution-horizon H] [--workers N]`` (needs ``pip install
"rlmesh-py[openpi]" metaworld``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

import rlmesh
from rlmesh.numpy import Model
from rlmesh.openpi import PolicyClient
from rlmesh.serve import ModelServer


@dataclass
class Args:
    task: str = "reach-v3"
    """The Meta-World task (MT1 name)."""
    episodes: int = 5
    """Episodes to run (seeds 0 .. episodes-1)."""
    url: str | None = None
    """An openpi policy server to evaluate; None: serve Meta-World's scripted expert here."""
    execution_horizon: int = 1
    """Actions replayed from each chunk before asking the server again."""
    workers: int | None = None
    """Run the episodes in this many worker processes (each dials the server itself)."""


class ScriptedOpenPIPolicy(Model):
    """Meta-World's expert for one task, reading the openpi observation dict."""

    workflow_edition = "2026.06"

    def __init__(self, task: str) -> None:
        from metaworld import policies

        name = (
            "Sawyer"
            + "".join(p.capitalize() for p in task.replace("-v3", "").split("-"))
            + "V3Policy"
        )
        self.expert = getattr(policies, name)()
        super().__init__()

    def predict(self, obs: dict[str, Any]) -> Any:
        return np.asarray(self.expert.get_action(obs["observation/state"]), np.float32)


def make_env(task: str) -> tuple[Any, dict[str, Any], str | None]:
    """The env, the obs_map that sends its state as ``observation/state``, and the prompt."""
    if importlib.util.find_spec("metaworld") is None:
        sys.exit("this example needs Meta-World: pip install metaworld (and rlmesh-py[openpi])")
    try:
        from rlmesh.suites import metaworld as suite  # type: ignore[attr-defined]
    except ImportError:
        suite = None
    if suite is not None:
        print(f"env: rlmesh.suites.metaworld.make_env({task!r}) (its instruction is the prompt)")
        return functools.partial(suite.make_env, task), {"observation/state": "state"}, None
    import gymnasium as gym

    try:
        import metaworld  # noqa: F401 - registers Meta-World/MT1 with Gymnasium
    except ImportError:
        sys.exit("this example needs Meta-World: pip install metaworld (and rlmesh-py[openpi])")
    print(
        "env: rlmesh.suites.metaworld is not in this rlmesh; using "
        f'gymnasium.make("Meta-World/MT1", env_name={task!r})'
    )
    return (
        functools.partial(gym.make, "Meta-World/MT1", env_name=task),
        {"observation/state": ""},
        task,
    )


def main(args: Args) -> int:
    make, obs_map, prompt = make_env(args.task)
    server = None
    url = args.url
    if url is None:
        sessions = args.workers or 1
        server = ModelServer(
            ScriptedOpenPIPolicy(args.task), "127.0.0.1:0", protocol="openpi", sessions=sessions
        ).start()
        url = server.address
        print(f"serving Meta-World's scripted {args.task} policy on {url} (openpi protocol)")
    try:
        policy = PolicyClient(url, obs_map=obs_map, prompt=prompt)
        print(f"server metadata: {policy.metadata}")
        env = make if args.workers else make()
        result = rlmesh.run(
            policy,
            env,
            seeds=range(args.episodes),
            execution_horizon=args.execution_horizon,
            workers=args.workers,
            close_env=not args.workers,
        )
        policy.close()
    finally:
        if server is not None:
            server.shutdown()
    successes = [e.success for e in result.episodes]
    print(
        f"{args.task}: {result.num_episodes} episodes, success {result.success_rate:.2f} {successes}"
    )
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    d = Args()
    p.add_argument("--task", default=d.task)
    p.add_argument("--episodes", type=int, default=d.episodes)
    p.add_argument("--url", default=d.url)
    p.add_argument("--execution-horizon", type=int, default=d.execution_horizon)
    p.add_argument("--workers", type=int, default=d.workers)
    sys.exit(main(Args(**vars(p.parse_args()))))
