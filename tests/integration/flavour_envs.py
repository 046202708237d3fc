"""Framework envs for ``python -m rlmesh.serve ... --framework torch|jax`` tests (imported by a child process)."""

from __future__ import annotations

from typing import Any

import rlmesh.spaces as rs


class TorchDoubler:
    """Box(2) in, Box(2) out: ``obs = 2 * action``; refuses anything but a torch tensor."""

    observation_space = rs.Box(-10.0, 10.0, (2,))
    action_space = rs.Box(-1.0, 1.0, (2,))

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        import torch

        return torch.zeros(2), {}

    def step(self, action: Any) -> Any:
        import torch

        if not isinstance(action, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor action, got {type(action).__name__}")
        return (
            action * 2,
            torch.tensor(1.0),
            torch.tensor(False),
            False,
            {"device": action.device.type},
        )

    def close(self) -> None:
        pass


def make_torch_doubler() -> TorchDoubler:
    return TorchDoubler()
