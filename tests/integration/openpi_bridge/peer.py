"""The openpi-client peer: run by the peer venv's python (openpi-client 0.1.2, numpy<2).

Commands (each prints one JSON document on stdout):

- ``pack``: openpi_client.msgpack_numpy's bytes (hex) for every value of :func:`catalog`;
- ``unpack``: read hex messages (one per stdin line), describe what openpi_client reads;
- ``infer URL [N]``: ``WebsocketClientPolicy`` against URL: the metadata and N replies to the
  observation of :func:`observation` (a 224x224x3 image, an 8-float state, a prompt); a
  server error (RuntimeError) is reported, not raised;
- ``serve PORTFILE SECONDS``: an openpi-style policy server written with openpi_client's
  packing (metadata on connect; ``{"actions": tile(state[:4], (10, 1))}``; the prompt
  ``"fail"`` answers with a traceback text and close code 1011, as openpi's server does),
  for PolicyClient to talk to; it stops after SECONDS.

The catalog lives here, with numpy only, so the tests build the same values with rlmesh's
numpy and compare bytes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def catalog() -> list[Any]:
    """Values whose packed bytes must agree byte for byte."""
    return [
        {"actions": np.arange(12, dtype=np.float32).reshape(3, 4)},
        {"observation/image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
         "observation/state": np.linspace(-1, 1, 5), "prompt": "pick up the cup"},
        np.float32(1.5),
        np.int64(-7),
        np.bool_(True),
        np.zeros((0, 3), dtype=np.int16),
        np.array(3.25),
        np.arange(6, dtype=">i4").reshape(2, 3),
        np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::2],
        np.array([True, False, True]),
        {"nested": {"list": [1, 2.5, "x", None, np.uint16(9)], "tuple": (1, 2)}, "empty": {}},
        [b"raw bytes", "text", 2**40, -(2**31)],
    ]  # fmt: skip


def observation() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/state": np.arange(8, dtype=np.float32) / 8,
        "prompt": "pick up the cup",
    }


def describe(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"ndarray": value.dtype.str, "shape": list(value.shape), "values": value.tolist(),
                "writeable": bool(value.flags.writeable)}  # fmt: skip
    if isinstance(value, np.generic):
        return {"generic": value.dtype.str, "value": value.item()}
    if isinstance(value, dict):
        return {"dict": {str(k): describe(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"list": [describe(v) for v in value]}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    return value


def main(argv: list[str]) -> int:
    from openpi_client import msgpack_numpy

    command = argv[0]
    if command == "pack":
        print(json.dumps([msgpack_numpy.packb(v).hex() for v in catalog()]))
    elif command == "unpack":
        lines = [line.strip() for line in sys.stdin if line.strip()]
        print(json.dumps([describe(msgpack_numpy.unpackb(bytes.fromhex(h))) for h in lines]))
    elif command == "infer":
        from openpi_client.websocket_client_policy import WebsocketClientPolicy

        url, n = argv[1], int(argv[2]) if len(argv) > 2 else 1
        host, port = url[len("ws://") :].rsplit(":", 1)
        policy = WebsocketClientPolicy(host, int(port))
        out: dict[str, Any] = {"metadata": describe(policy.get_server_metadata()), "replies": []}
        obs = observation()
        for _ in range(n):
            if len(argv) > 3:
                obs["prompt"] = argv[3]
            try:
                reply = policy.infer(obs)
            except RuntimeError as exc:
                out["error"] = str(exc)
                break
            out["replies"].append({k: describe(v) for k, v in reply.items()})
        print(json.dumps(out))
    elif command == "serve":
        import threading
        import traceback

        import websockets.sync.server as wss

        packer = msgpack_numpy.Packer()

        def handler(ws: Any) -> None:
            ws.send(packer.pack({"policy": "peer", "action_dim": 4, "horizon": 10}))
            while True:
                try:
                    obs = msgpack_numpy.unpackb(ws.recv())
                except Exception:
                    return
                try:
                    if obs.get("prompt") == "fail":
                        raise ValueError("the peer policy was told to fail")
                    state = np.asarray(obs["observation/state"], dtype=np.float32)
                    ws.send(packer.pack({"actions": np.tile(state[:4], (10, 1)),
                                         "echo_keys": sorted(obs)}))  # fmt: skip
                except Exception:
                    ws.send(traceback.format_exc())
                    ws.close(1011, "Internal server error. Traceback included in previous frame.")
                    return

        server = wss.serve(handler, "127.0.0.1", 0, compression=None, max_size=None)
        port = server.socket.getsockname()[1]
        threading.Timer(float(argv[2]), server.shutdown).start()
        with open(argv[1] + ".tmp", "w") as fh:
            fh.write(f"ws://127.0.0.1:{port}")
        import os

        os.replace(argv[1] + ".tmp", argv[1])
        server.serve_forever()
        print(json.dumps({"served": True}))
    else:
        raise SystemExit(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
