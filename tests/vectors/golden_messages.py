"""The messages behind ``frames.txt``: the Python reference's side of the shared golden vectors.

``frames.txt`` holds one frame per line (``name request_id hex``). The Python golden
test (``tests/unit/wire/test_golden.py``) encodes the messages below and compares them
with those bytes, and decodes the bytes back; the Rust crate's ``rust/tests/golden.rs``
builds the same messages by name and does the same. Neither implementation can drift
without a test failing. After a deliberate wire change, regenerate the file with
``python tests/vectors/golden_messages.py > tests/vectors/frames.txt`` and update the
Rust side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.spaces._spec import SpaceSpec
from rlmesh.wire import messages as m

PEER = m.PeerInfo(
    component="rlmesh-env",
    package_version="0.1.0",
    language="python",
    language_version="3.11.7",
    os="linux",
    os_version="6.1",
    arch="x86_64",
)
OBS = np.array([0.5, -0.25, 0.125, 1.0], dtype="<f4")
EPISODE_ID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
RECORD = m.EpisodeRecord(
    episode_id=EPISODE_ID,
    seed=7,
    env_index=0,
    step_count=12,
    cumulative_reward=11.5,
    terminated=True,
    truncated=False,
    start_timestamp_ns=1_700_000_000_000_000_000,
    end_timestamp_ns=1_700_000_000_250_000_000,
    final_info={"reason": "fell"},
)
INFO = {
    "lives": 3,
    "arr": np.array([[1, 2], [3, 4]], dtype="<i4"),
    "f": 2.0,
    "u": 2**64 - 1,
    "neg": -200,
    "b": b"\x00\x01",
    "nested": {"l": [1, "x", None, True]},
}
CONTRACT = {
    "id": "CartPole-v1",
    "render_mode": None,
    "num_envs": 1,
    "metadata": None,
    "observation_space": SpaceSpec._box(
        (4,), "float32", [-4.8, -np.inf, -0.5, -np.inf], [4.8, np.inf, 0.5, np.inf]
    )._to_dict(),
    "action_space": SpaceSpec._discrete(2)._to_dict(),
    "autoreset_mode": "Disabled",
}
DICT_SPACE_CONTRACT = {
    "observation_space": SpaceSpec._dict(
        {
            "image": SpaceSpec._box((2, 2), "uint8", 0, 255),
            "mode": SpaceSpec._discrete(3),
            "text": SpaceSpec._text(8, min_length=0, charset="ab"),
            "pair": SpaceSpec._tuple(
                [SpaceSpec._multi_binary(3), SpaceSpec._multi_discrete([[2, 3], [4, 5]])]
            ),
            "big": SpaceSpec._box((2,), "uint64", 0, 2**64 - 1),
            "flag": SpaceSpec._box((), "bool", 0, 1),
        }
    )._to_dict(),
}

#: name -> (message, request id, segments)
GOLDEN: dict[str, tuple[Any, int, list[Any]]] = {
    "hello": (
        m.Hello(generation="rlmesh-py-v1", peer=PEER, editions=["2026.06"], preferred="2026.06"),
        1,
        [],
    ),
    "hello_token": (
        m.AuthHello(
            generation="rlmesh-py-v1",
            peer=PEER,
            editions=["2026.06"],
            preferred="2026.06",
            token="s3cret-t0ken",
        ),
        1,
        [],
    ),
    "step_request": (m.Step(action=[1]), 2, []),
    "step_reply": (m.StepReply(obs=[], reward=1.0), 2, [OBS]),
    "welcome": (
        m.Welcome(
            generation="rlmesh-py-v1",
            peer=PEER,
            editions=["2026.06"],
            preferred="2026.06",
            selected="2026.06",
            session_id="3f2b6c1e-8d4a-4b7e-9c2d-1a0e5f6b7c8d",
            contract=CONTRACT,
        ),
        1,
        [],
    ),
    "welcome_dict_space": (
        m.Welcome(
            generation="rlmesh-py-v1",
            peer=PEER,
            editions=["2026.06"],
            preferred=None,
            selected="2026.06",
            session_id="s",
            contract=DICT_SPACE_CONTRACT,
            capabilities={"shm": "1"},
        ),
        1,
        [],
    ),
    "busy": (m.Busy(message="environment already has an active session"), 1, []),
    "incompatible": (
        m.Incompatible(message="no", generation="rlmesh-py-v1", editions=["2026.06"]),
        1,
        [],
    ),
    "incompatible_unauthenticated": (
        m.Refusal(
            message="authentication failed: this endpoint needs a token and the client sent none",
            generation="rlmesh-py-v1",
            reason=m.UNAUTHENTICATED,
        ),
        1,
        [],
    ),
    "reset_request": (
        m.Reset(seeds=[7], options={"difficulty": 2}, episode_ids=[EPISODE_ID], timeout_ms=250),
        3,
        [],
    ),
    "reset_request_unseeded": (m.Reset(seeds=[None], episode_ids=[EPISODE_ID]), 3, []),
    "reset_reply": (m.ResetReply(obs=[], info=INFO, endpoint_ns=1234), 3, [OBS]),
    "step_request_no_action": (
        m.Step(action=[], episode_ids={0: EPISODE_ID}, timeout_ms=5, has_action=False),
        4,
        [],
    ),
    "step_reply_done": (
        m.StepReply(obs=[1], reward=-0.5, terminated=True, completed=[RECORD], endpoint_ns=99),
        4,
        [],
    ),
    "step_reply_segments": (
        m.StepReply(obs=[2, "hi"], reward=0.0, truncated=True, info={"k": "v"}),
        5,
        [np.array([1, 2, 3], dtype=np.uint8), np.array([1.5, -2.0], dtype="<f4")],
    ),
    "render_request": (m.Render(env_index=0, timeout_ms=0), 6, []),
    "render_reply": (
        m.RenderReply(format="raw", shape=[2, 2, 3]),
        6,
        [np.arange(12, dtype=np.uint8)],
    ),
    "render_reply_none": (m.RenderReply(), 6, []),
    "close_request": (m.Close(reason=""), 7, []),
    "close_reply": (m.CloseReply(final_episodes=[RECORD]), 7, []),
    "shutdown_request": (m.Shutdown(reason="done"), 8, []),
    "shutdown_reply": (
        m.ShutdownReply(accepted=False, message="remote shutdown is disabled"),
        8,
        [],
    ),
    "shutdown_request_token": (m.AuthShutdown(reason="done", token="s3cret-t0ken"), 8, []),
    "ping": (m.Ping(), 0, []),
    "ping_token": (m.AuthPing(token="s3cret-t0ken"), 0, []),
    "pong": (m.Pong(state="ready", generation="rlmesh-py-v1", service="env"), 0, []),
    "pong_withheld": (
        m.AuthPong(state="busy", generation="rlmesh-py-v1", service="env", auth="required"),
        0,
        [],
    ),
    "configure": (m.Configure(edition="2026.06"), 9, []),
    "configure_reply": (m.ConfigureReply(edition="2026.06"), 9, []),
    "attach_reply": (m.AttachReply(attached=False), 10, []),
    "error_fatal": (
        m.Error(code=10, message="step failed: boom", recoverable=False, op="step"),
        11,
        [],
    ),
    "error_recoverable": (
        m.Error(code=10, message="step failed: try again", recoverable=True, op="step"),
        12,
        [],
    ),
    "error_protocol": (m.Error(code=14, message="not an rlmesh frame", recoverable=False), 0, []),
}


def encode(name: str) -> bytes:
    """The frame bytes the Python reference writes for ``GOLDEN[name]``."""
    from rlmesh.wire.messages import encode_message

    msg, rid, segments = GOLDEN[name]
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(msg, rid, segments))


if __name__ == "__main__":
    print("# Shared golden frames: name request_id hex (see golden_messages.py). Read by")
    print("# tests/unit/wire/test_golden.py and rust/tests/golden.rs.")
    for _name, (_msg, _rid, _segs) in GOLDEN.items():
        print(_name, _rid, encode(_name).hex())
