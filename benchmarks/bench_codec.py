"""Codec alone (no socket): encode + decode of the image observation vs a plain bytes copy.

The observation is {"image": uint8 224x224x3, "state": float32[16]} (150,592 bytes). The
"encode+decode" path is exactly what a server and a client do around the socket: coerce
and lay out the frame (no payload copy), then fill one fresh aligned buffer (the one copy a
socket read makes) and view the leaves out of it. The floor is one ``bytes`` copy of the
same payload size.
"""

from __future__ import annotations

import numpy as np
from _common import report, time_loop

from rlmesh._plan import value_plan
from rlmesh.spaces._spec import SpaceSpec
from rlmesh.wire import (
    PREFIX_SIZE,
    decode_header,
    decode_prefix,
    messages as m,
    new_body,
    split_body,
)
from rlmesh.wire.messages import encode_message

SPEC = SpaceSpec._dict(
    {
        "image": SpaceSpec._box((224, 224, 3), "uint8", 0, 255),
        "state": SpaceSpec._box((16,), "float32"),
    }
)
OBS = {
    "image": np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8),
    "state": np.ones(16, np.float32),
}


def main() -> dict[str, float]:
    plan = value_plan(SPEC)  # encoder + codec + decoder of the space, compiled once
    wire = bytearray()  # stands in for the kernel's socket buffer
    for b in encode_message(m.StepReply(obs=[]), 1, plan.pack(OBS)[1]):
        wire += memoryview(b).cast("B")
    raw = np.frombuffer(bytes(wire), np.uint8)

    def encode(_: int) -> object:
        return encode_message(m.StepReply(obs=[]), 1, plan.pack(OBS)[1])

    def decode(_: int) -> object:
        layout = decode_prefix(raw[:PREFIX_SIZE].tobytes())
        body = new_body(layout)
        body[:] = raw[PREFIX_SIZE:]  # the one copy (recv_into does it in the transport)
        frame = split_body(layout, body)
        msg = decode_header(frame)
        return plan.unpack(msg.obs, frame.segments)

    payload = bytes(OBS["image"].tobytes() + OBS["state"].tobytes())

    def copy(_: int) -> object:
        return bytearray(payload)

    out = {
        "encode_us": report("encode (coerce + frame layout, no copy)", time_loop(encode, 2000)),
        "decode_us": report("decode (one copy + views)", time_loop(decode, 2000)),
        "bytes_copy_us": report("plain bytes copy of 150,592 bytes", time_loop(copy, 2000)),
    }
    ratio = (out["encode_us"] + out["decode_us"]) / out["bytes_copy_us"]
    print(f"{'encode+decode / bytes copy':44s} {ratio:10.2f} x")
    out["ratio"] = ratio
    return out


if __name__ == "__main__":
    main()
