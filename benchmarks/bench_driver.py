"""The serve hot path without sockets: ``Driver.step`` over the driven env (issue 10).

Times what an ``EnvServer`` does per Step request between decoding the frame and
encoding the reply -- action decode, the env call through ``rlmesh.serve._driven``,
episode books (AR-4..AR-6) and observation encoding -- for a trivial scalar env
(driver overhead only) and a 16-lane CartPole ``SyncVectorEnv`` (NEXT_STEP).
No sockets, so it is far less noisy than bench_scalar.py / bench_vector.py;
compare two checkouts by running it with each on ``PYTHONPATH``, alternating.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
from _common import report, time_loop
from envs import cartpole_lanes

from rlmesh._plan import value_plan
from rlmesh.serve._driver import Driver
from rlmesh.wire import messages as m

try:
    from rlmesh.serve._driven import driven_env
except ImportError:  # a checkout from before issue 23, for A/B runs
    from rlmesh._envview import view_of as driven_env  # type: ignore[import-not-found,no-redef]

LANES = 16


class Trivial:
    """A scalar env that costs nothing: the figure is the driver's own overhead."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    metadata: dict[str, Any] = {}

    def __init__(self) -> None:
        self.obs = np.zeros(4, np.float32)

    def reset(
        self, seed: int | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        return self.obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.obs, 1.0, False, False, {}

    def close(self) -> None:
        pass


def driver_loop(env: Any, lanes: int | None, actions: list[Any]) -> Any:
    """``fn(i)`` stepping a fresh driver over ``env`` with ``actions[i % 2]``."""
    driven = driven_env(env)
    driver = Driver(driven)
    driver.begin_session()
    driver.reset(m.Reset(seeds=[0] * (lanes or 1)))
    pack = value_plan(driven.act_space, lanes=lanes).pack
    requests = []
    for action in actions:
        scalars, segments = pack(action)
        requests.append((m.Step(action=scalars), segments))
    return lambda i: driver.step(*requests[i & 1])


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    scalar = report(
        "Driver.step, trivial scalar env",
        time_loop(driver_loop(Trivial(), None, [0, 1]), args.steps, args.reps),
    )
    vector_actions = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]
    vector = report(
        "Driver.step, 16-lane CartPole (NEXT_STEP)",
        time_loop(
            driver_loop(cartpole_lanes(LANES), LANES, vector_actions),
            max(1, args.steps // 10),
            args.reps,
        ),
    )
    return {"scalar_us": scalar, "vector16_us": vector}


if __name__ == "__main__":
    main()
