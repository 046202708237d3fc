"""The rlmesh wire protocol, sans-IO: frames, message headers, the value codec, sessions.

Nothing here touches a socket; transports are thin loops around these functions
(docs/protocol.md describes the bytes).
"""

from . import messages as messages
from .frames import (
    DEFAULT_LIMITS as DEFAULT_LIMITS,
    PRE_HANDSHAKE_LIMITS as PRE_HANDSHAKE_LIMITS,
    PREFIX_SIZE as PREFIX_SIZE,
    Frame as Frame,
    FrameLimits as FrameLimits,
    FramePlan as FramePlan,
    decode_prefix as decode_prefix,
    encode_frame as encode_frame,
    new_body as new_body,
    split_body as split_body,
)
from .handshake import (
    answer_hello as answer_hello,
    make_hello as make_hello,
    peer_info as peer_info,
)
from .messages import decode_header as decode_header, encode_message as encode_message
from .meta import normalize as normalize_metadata
from .session import Session as Session
from .values import ValueCodec as ValueCodec

__all__ = [
    "DEFAULT_LIMITS",
    "PREFIX_SIZE",
    "PRE_HANDSHAKE_LIMITS",
    "Frame",
    "FrameLimits",
    "FramePlan",
    "Session",
    "ValueCodec",
    "answer_hello",
    "decode_header",
    "decode_prefix",
    "encode_frame",
    "encode_message",
    "make_hello",
    "messages",
    "new_body",
    "normalize_metadata",
    "peer_info",
    "split_body",
]
