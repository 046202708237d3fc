"""Serve an rlmesh model to openpi clients (openpi-client's ``WebsocketClientPolicy``, robots,
scripts) with ``ModelServer(..., protocol="openpi")``.

The model here answers a 10-step chunk of 7-D actions from a 224x224x3 camera image, an
8-float state and a prompt: the shape of a LIBERO-style VLA, with no network behind it.
The same from the command line: ``rlmesh serve-model examples/openpi/serve_model.py:model
--protocol openpi --address 127.0.0.1:8000``.

Run: ``python examples/openpi/serve_model.py [--address 127.0.0.1:8000] [--seconds 60]``;
then, from a venv with ``pip install openpi-client``:
``python examples/openpi/openpi_client_infer.py --host 127.0.0.1 --port 8000``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlmesh.numpy import Model
from rlmesh.serve import ModelServer


class ToyVLA(Model):
    """``{"observation/image", "observation/state", "prompt"} -> [10, 7]`` actions."""

    native_chunk = 10  # every reply carries 10 actions; the client decides how many to run
    workflow_edition = "2026.06"

    def predict_chunk(self, obs: dict[str, Any], execution_horizon: int) -> Any:
        image = np.asarray(obs["observation/image"], np.float32) / 255.0
        state = np.asarray(obs["observation/state"], np.float32)
        gripper = 1.0 if "pick" in str(obs.get("prompt", "")) else -1.0
        step = np.concatenate([state[:6] * 0.1 + image.mean() * 0.01, [gripper]])
        decay = 0.9 ** np.arange(execution_horizon, dtype=np.float32)[:, None]
        return (step[None, :] * decay).astype(np.float32)


model = ToyVLA()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--address", default="127.0.0.1:8000", help="host:port to serve on")
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    args = p.parse_args()
    with ModelServer(model, args.address, protocol="openpi", sessions=4).start() as server:
        print(f"serving {type(model).__name__} to openpi clients on {server.address}", flush=True)
        time.sleep(args.seconds)
    print("server stopped")


if __name__ == "__main__":
    main()
