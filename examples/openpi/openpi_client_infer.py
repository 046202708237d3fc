"""Ask an openpi policy server for actions with openpi's own client (``openpi-client``).

Run it where ``openpi-client`` is installed (``pip install openpi-client``; it pins
``numpy<2``, so give it a venv of its own), against ``examples/openpi/serve_model.py`` or any
openpi-protocol server: ``python openpi_client_infer.py --host 127.0.0.1 --port 8000``.
It prints the server's metadata, then the shape of each reply and the server's timing.
"""

from __future__ import annotations

import argparse

import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    policy = WebsocketClientPolicy(args.host, args.port)
    print("metadata:", policy.get_server_metadata())
    rng = np.random.default_rng(0)
    for _ in range(args.steps):
        obs = {
            "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "observation/state": rng.standard_normal(8).astype(np.float32),
            "prompt": "pick up the black bowl",
        }
        reply = policy.infer(obs)
        actions = reply["actions"]
        print(f"actions {actions.dtype}{list(actions.shape)}, first {np.round(actions[0], 3).tolist()}, "
              f"server timing {reply['server_timing']}")  # fmt: skip


if __name__ == "__main__":
    main()
