"""A pure-numpy toy env authored as an ``EnvFactory``: a point that must reach a goal.

Read top to bottom: the env, then the factory that declares its construction
parameters (``ParamSpec``), its two named variants, and ``make``.

    python point_reach.py describe                 # the describe.v1 envelope
    python point_reach.py serve --address 127.0.0.1:50051 --difficulty hard
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

import rlmesh
from rlmesh.authoring import EnvFactory, Variant
from rlmesh.params import Param, ParamSpec, Vector
from rlmesh.spaces import Box

#: Step size and observation noise per difficulty.
DIFFICULTY = {"easy": (0.10, 0.0), "hard": (0.05, 0.02)}


class PointReachEnv:
    """Move a point in the unit square towards ``goal``.

    Observation: ``float32[4]`` = (x, y, goal_x, goal_y). Action: ``float32[2]``
    displacement, clipped to ``[-1, 1]`` and scaled by the difficulty's step
    size. Reward: minus the distance to the goal; the episode terminates within
    0.05 of the goal and truncates after ``max_steps``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, goal: tuple[float, float], difficulty: str, max_steps: int) -> None:
        self.observation_space = Box(-1.0, 1.0, (4,), "float32")
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.goal = np.asarray(goal, dtype=np.float32)
        self.step_size, self.noise = DIFFICULTY[difficulty]
        self.max_steps = max_steps
        self.rng = np.random.default_rng()
        self.pos = np.zeros(2, dtype=np.float32)
        self.t = 0

    def _obs(self) -> np.ndarray:
        pos = self.pos + self.rng.normal(0.0, self.noise, 2) if self.noise else self.pos
        return np.clip(np.concatenate([pos, self.goal]), -1.0, 1.0).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pos = self.rng.uniform(-1.0, 1.0, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any):
        move = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1.0, 1.0)
        self.pos = np.clip(self.pos + self.step_size * move, -1.0, 1.0).astype(np.float32)
        self.t += 1
        distance = float(np.linalg.norm(self.pos - self.goal))
        terminated = distance < 0.05
        truncated = not terminated and self.t >= self.max_steps
        return self._obs(), -distance, terminated, truncated, {"is_success": terminated}

    def close(self) -> None:
        pass


class PointReachFactory(EnvFactory):
    """Builds :class:`PointReachEnv`; two named variants, three declared params."""

    workflow_edition = "2026.06"
    params = ParamSpec(
        Param("difficulty", "enum", choices=("easy", "hard"), description="Step size and noise"),
        Param("goal", Vector(2), description="Goal position in [-1, 1]^2", group="task"),
        Param("max_steps", int, description="Truncate after this many steps"),
    )

    @classmethod
    def enumerate_variants(cls) -> list[Variant]:
        return [
            Variant(
                "easy/center",
                {"difficulty": "easy", "goal": (0.0, 0.0)},
                name="Easy: reach the center",
            ),
            Variant(
                "hard/corner",
                {"difficulty": "hard", "goal": (0.8, 0.8)},
                name="Hard: reach the corner",
            ),
        ]

    def make(
        self, difficulty: str = "easy", goal: tuple[float, float] = (0.0, 0.0), max_steps: int = 200
    ) -> PointReachEnv:
        return PointReachEnv(goal=goal, difficulty=difficulty, max_steps=max_steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("describe", help="print the canonical describe envelope")
    serve = sub.add_parser("serve", help="serve the env (blocking; Ctrl-C to stop)")
    serve.add_argument("--address", default="127.0.0.1:50051")
    serve.add_argument("--difficulty", default=None)
    serve.add_argument("--goal", type=json.loads, default=None, help="e.g. '[0.8, 0.8]'")
    args = parser.parse_args()
    if args.command == "describe":
        print(rlmesh.authoring.describe_json(PointReachFactory))
        return
    kwargs = {
        k: v for k, v in (("difficulty", args.difficulty), ("goal", args.goal)) if v is not None
    }
    PointReachFactory().serve(args.address, **kwargs)


if __name__ == "__main__":
    main()
