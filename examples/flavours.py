"""torch and jax end to end: a torch vector env served with framework="torch", driven by a
jax client and evaluated with a torch model.

    python examples/flavours.py        # needs torch and jax (CPU builds are fine)
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

import rlmesh
import rlmesh.jax as rj
import rlmesh.spaces as rs
import rlmesh.torch as rt

LANES = 4


class Reach:
    """LANES points on a line, computed in torch: push left (0) or right (1) to reach 0."""

    num_envs = LANES
    single_observation_space = rs.Box(-10.0, 10.0, (1,))
    single_action_space = rs.Discrete(2)
    metadata = {"autoreset_mode": "NextStep"}

    def reset(self, *, seed: int | list[int | None] | None = None, options: Any = None) -> Any:
        if isinstance(seed, list):  # a vector env gets one seed per lane, as the caller gave them
            seed = seed[0]
        g = torch.Generator().manual_seed(seed or 0)
        self.pos = torch.rand(LANES, 1, generator=g) * 8 - 4
        self.t = torch.zeros(LANES, dtype=torch.int64)
        self.pending = torch.zeros(LANES, dtype=torch.bool)  # lanes that autoreset on this step
        return self.pos.clone(), {}

    def step(
        self, action: torch.Tensor
    ) -> Any:  # an int64 tensor [LANES], thanks to framework="torch"
        self.pos += (action.float() * 2 - 1).unsqueeze(1) * 0.5
        self.t += 1
        reward = -self.pos.abs().squeeze(1)
        done = self.pos.abs().squeeze(1) < 0.5
        truncated = self.t >= 50
        # NEXT_STEP autoreset: a lane that ended last step restarts now, reward 0, not done
        self.pos[self.pending] = 3.0
        self.t[self.pending] = 0
        reward[self.pending] = 0.0
        done[self.pending] = False
        truncated[self.pending] = False
        self.pending = done | truncated
        return self.pos.clone(), reward, done, truncated, {}

    def close(self) -> None:
        pass


class Greedy(rt.Model):
    device = "cpu"

    def predict_batch(self, obs: torch.Tensor) -> torch.Tensor:  # [N, 1] tensors
        return (obs[:, 0] < 0).long()


def main() -> None:
    # declaring the protocol edition this code was written for keeps WorkflowEditionWarning away
    options = rlmesh.ServeOptions(workflow_edition=rlmesh.current_workflow_edition())
    with rlmesh.EnvServer(
        Reach(), "127.0.0.1:0", framework="torch", options=options
    ).start() as server:
        with rj.RemoteVectorEnv(server.address, device="cpu") as envs:
            obs, info = envs.reset(seed=1)
            obs, rewards, terminated, truncated, info = envs.step(jnp.zeros(LANES, jnp.int32))
            print(
                f"jax client: obs {type(obs).__name__}{tuple(obs.shape)}, rewards {rewards.dtype}"
            )
        result = rlmesh.run(Greedy(), server.address, max_episodes=8, seeds=list(range(LANES)))
        print(f"torch model: {result.num_episodes} episodes, mean reward {result.mean_reward:.2f}")


if __name__ == "__main__":
    main()
