"""Models the openpi tests serve (``rlmesh serve-model served_openpi:NAME --protocol openpi``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.numpy import Model


class ChunkPolicy(Model):
    """A 10-frame chunk of ``state[:6] + [len(prompt)]``; the prompt ``"fail"`` raises."""

    native_chunk = 10

    def predict_chunk(self, obs: dict[str, Any], execution_horizon: int) -> Any:
        if obs.get("prompt") == "fail":
            raise ValueError("the policy was told to fail")
        image = obs["observation/image"]
        assert image.shape == (224, 224, 3) and image.dtype == np.uint8
        frame = np.concatenate([obs["observation/state"][:6], [len(obs.get("prompt", ""))]]).astype(
            np.float32
        )
        return np.tile(frame, (execution_horizon, 1))
