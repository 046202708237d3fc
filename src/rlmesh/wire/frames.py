"""Frames: the byte layout every rlmesh message travels in (sans-IO).

Theory of operation
-------------------
A frame is a fixed 24-byte little-endian *prefix* followed by a *body*::

    offset size  field
    0      2     magic          b"RM"
    2      1     version        1
    3      1     kind           message kind (see messages.py)
    4      4     request_id     u32; a reply echoes its request's id (SES-3)
    8      4     header_len     u32; bytes of the msgpack header
    12     4     segment_count  u32; number of raw segments
    16     8     body_len       u64; bytes after the prefix

    body:  header (msgpack) | pad to 8 | segment table (segment_count x u64 LE)
           | for each segment: pad to a multiple of 64 (relative to body start), bytes

The prefix alone says how many bytes follow, so a receiver validates every
length against :class:`FrameLimits` *before* allocating, then fills one fresh
buffer with ``recv_into`` and hands out segments as views of it (one copy from
the kernel, writable arrays, never reused under the caller's feet). Segment
starts are 64-byte aligned within the body; the receiver allocates the body
64-byte aligned, so every segment is aligned for numpy, DLPack and XLA.

A sender never copies tensor payloads: :func:`encode_frame` returns a list of buffers
(``[prefix+header+table, pad, segment, pad, segment, ...]``) whose segments are
the caller's own memory, ready for ``socket.sendmsg``. Only a frame whose body is at
most :data:`INLINE_MAX` bytes (a CartPole step, a batch of rewards) is joined into one
buffer, where a copy is cheaper than more iovecs.

Invariants: ``body_len`` equals exactly the layout end computed from
``header_len``, the table and the padding; a mismatch, an unknown magic or
version, or any length over the limits raises :class:`ProtocolException`, and
nothing else escapes :meth:`FrameReader.finish` on bad input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ProtocolException
from ..tensor import aligned_empty

__all__ = [
    "MAGIC",
    "PREFIX_SIZE",
    "VERSION",
    "Frame",
    "FrameLimits",
    "FramePlan",
    "decode_prefix",
    "decode_prefix_at",
    "default_limits",
    "encode_frame",
    "split_body",
]

MAGIC = b"RM"
VERSION = 1
PREFIX = struct.Struct("<2sBBIIIQ")
PREFIX_SIZE = PREFIX.size  # 24
SEGMENT_ALIGN = 64
_ZEROS = bytes(SEGMENT_ALIGN)


@dataclass(frozen=True)
class FrameLimits:
    """Bounds checked on the prefix alone, before any allocation.

    Attributes:
        max_frame_bytes: Largest body accepted. 256 MiB matches the reference's
            gRPC message cap (WIRE-1): big enough for a batch of 16 1080p RGB
            frames, small enough that one bad prefix cannot exhaust memory.
        max_header_bytes: Largest msgpack header. Headers carry contracts, info
            dicts and metadata; 16 MiB admits an elementwise-bounded 1080p Box
            while still refusing absurd lengths early.
        max_segments: Most raw segments in one frame. A segment is one tensor
            leaf (times lanes in batched form); 4096 leaves is far beyond any
            observation seen in robotics stacks and bounds the table to 32 KiB.
    """

    max_frame_bytes: int = 256 * 1024 * 1024
    max_header_bytes: int = 16 * 1024 * 1024
    max_segments: int = 4096


#: Limits for a connection that has not completed its handshake: only Hello,
#: Ping and Shutdown are legal there and all are tiny, so a stranger cannot make
#: the server reserve a large buffer.
PRE_HANDSHAKE_LIMITS = FrameLimits(
    max_frame_bytes=1024 * 1024, max_header_bytes=1024 * 1024, max_segments=0
)
DEFAULT_LIMITS = FrameLimits()

#: Environment variable that raises (or lowers) ``max_frame_bytes`` for a process: set it
#: on both ends to move frames larger than 256 MiB (a batch of 4K camera frames, say).
MAX_FRAME_BYTES_ENV = "RLMESH_MAX_FRAME_BYTES"


def default_limits() -> FrameLimits:
    """:data:`DEFAULT_LIMITS`, with ``max_frame_bytes`` from ``RLMESH_MAX_FRAME_BYTES`` when set.

    Raises:
        ValueError: the variable is not a positive integer.
    """
    import os

    raw = os.environ.get(MAX_FRAME_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_LIMITS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{MAX_FRAME_BYTES_ENV} must be a positive number of bytes, got {raw!r}")
    return FrameLimits(
        max_frame_bytes=value, max_header_bytes=min(DEFAULT_LIMITS.max_header_bytes, value)
    )


class FramePlan:
    """What a validated prefix announces (a plain slotted record: built once per frame)."""

    __slots__ = ("body_len", "header_len", "kind", "request_id", "segment_count")

    def __init__(
        self, kind: int, request_id: int, header_len: int, segment_count: int, body_len: int
    ) -> None:
        self.kind = kind
        self.request_id = request_id
        self.header_len = header_len
        self.segment_count = segment_count
        self.body_len = body_len

    def __repr__(self) -> str:
        return (
            f"FramePlan(kind={self.kind:#04x}, request_id={self.request_id}, header_len={self.header_len}, "
            f"segment_count={self.segment_count}, body_len={self.body_len})"
        )


class Frame:
    """A received frame: header bytes plus segment views of the body buffer.

    ``header`` is the msgpack header's bytes (a view of the body, or a copy of them when
    the frame has no segments).
    """

    __slots__ = ("header", "kind", "request_id", "segments")

    def __init__(
        self,
        kind: int,
        request_id: int,
        header: memoryview | bytes | bytearray,
        segments: list[np.ndarray[Any, np.dtype[np.uint8]]],
    ) -> None:
        self.kind = kind
        self.request_id = request_id
        self.header = header
        self.segments = segments

    def __repr__(self) -> str:
        return f"Frame(kind={self.kind:#04x}, request_id={self.request_id}, segments={len(self.segments)})"


class Buffers(list[Any]):
    """The buffers of one frame, in order, plus their total size (saves the sender a sum)."""

    __slots__ = ("nbytes",)

    nbytes: int


#: A frame whose body is at most this many bytes is sent as one joined buffer: below
#: ~1 KiB copying its leaves is cheaper than the kernel's per-iovec work, and a
#: one-buffer frame goes out with a plain ``send()``. Larger frames hand their leaves
#: (camera frames, batches) to ``sendmsg`` as they are, never copied.
INLINE_MAX = 1024


_TABLES: dict[int, struct.Struct] = {}
_U64 = struct.Struct("<Q")


def _table(count: int) -> struct.Struct:
    table = _TABLES.get(count)
    if table is None:
        table = _TABLES[count] = struct.Struct(f"<{count}Q")
    return table


#: ``(header length % 64, segment bytes) -> bytes`` between a one-segment frame's header and
#: its segment (the header's pad, the one-entry table, the segment's pad): the same few
#: values come back every step.
_MIDS: dict[tuple[int, int], bytes] = {}


def _mid(hlen: int, n: int) -> bytes:
    pos = hlen + (-hlen % 8) + 8
    mid = _ZEROS[: -hlen % 8] + _U64.pack(n) + _ZEROS[: -pos % SEGMENT_ALIGN]
    if len(_MIDS) >= 1024:  # many sizes (a Text leaf of every length): start over
        _MIDS.clear()
    _MIDS[(hlen & 63, n)] = mid
    return mid


def _buffers(items: list[Any], nbytes: int) -> Buffers:
    out = Buffers(items)
    out.nbytes = nbytes
    return out


def encode_frame(
    kind: int, request_id: int, header: bytes, segments: list[Any] | tuple[Any, ...] = ()
) -> Buffers:
    """Lay out one frame as a list of buffers for ``sendmsg`` (no payload copies).

    Args:
        kind: Message kind byte.
        request_id: u32 request id (a reply echoes its request's).
        header: The msgpack-encoded header.
        segments: Raw segments: C-contiguous numpy arrays or bytes-like objects.

    Returns:
        ``[prefix + header + table, pad, seg, pad, seg, ...]``; the segments are
        the caller's memory, unchanged.

    >>> bufs = encode_frame(7, 1, b"\\x90")
    >>> b"".join(bytes(b) for b in bufs)[:4]
    b'RM\\x01\\x07'
    """
    hlen = len(header)
    count = len(segments)
    if not count:
        out = Buffers((PREFIX.pack(MAGIC, VERSION, kind, request_id, hlen, 0, hlen) + header,))
        out.nbytes = PREFIX_SIZE + hlen
        return out
    hpad = -hlen % 8
    pos = hlen + hpad + 8 * count
    if count == 1:  # the common case (one observation or action leaf): the pad rides in the head
        seg = segments[0]
        n = seg.nbytes if type(seg) is np.ndarray else memoryview(seg).nbytes
        mid = _MIDS.get((hlen & 63, n)) or _mid(hlen, n)  # header pad, table, segment pad
        body = hlen + len(mid) + n
        head = PREFIX.pack(MAGIC, VERSION, kind, request_id, hlen, 1, body)
        out = Buffers(
            (b"".join((head, header, mid, seg)),)
            if body <= INLINE_MAX
            else (b"".join((head, header, mid)), seg)
        )
        out.nbytes = PREFIX_SIZE + body  # a tiny frame (above): one buffer, one plain send()
        return out
    parts: list[Any] = [b"", header, _ZEROS[:hpad], b""]  # prefix and table filled in below
    lengths: list[int] = []
    for seg in segments:
        n = (
            seg.nbytes
            if type(seg) is np.ndarray
            else len(seg)
            if type(seg) is bytes
            else memoryview(seg).nbytes
        )
        lengths.append(n)
        pad = -pos % SEGMENT_ALIGN
        if pad:
            parts.append(_ZEROS[:pad])
        if n:
            parts.append(seg)
        pos += pad + n
    parts[0] = PREFIX.pack(MAGIC, VERSION, kind, request_id, hlen, count, pos)
    parts[3] = (_TABLES.get(count) or _table(count)).pack(*lengths)
    if pos <= INLINE_MAX:  # a tiny frame (a few lanes' step): one buffer, one plain send()
        out = Buffers((b"".join(parts),))
    else:  # the head joined; pads and segments as they are, never copied
        out = Buffers((b"".join(parts[:4]),))
        out.extend(parts[4:])
    out.nbytes = PREFIX_SIZE + pos
    return out


def decode_prefix(
    prefix: bytes | bytearray | memoryview, limits: FrameLimits = DEFAULT_LIMITS
) -> FramePlan:
    """Validate a 24-byte prefix against ``limits`` and say how many body bytes follow.

    Raises:
        ProtocolException: wrong magic/version, or a length over the limits.
    """
    if len(prefix) != PREFIX_SIZE:
        raise ProtocolException(f"frame prefix must be {PREFIX_SIZE} bytes, got {len(prefix)}")
    return decode_prefix_at(prefix, 0, limits)


def decode_prefix_at(
    buf: bytes | bytearray | memoryview, offset: int, limits: FrameLimits = DEFAULT_LIMITS
) -> FramePlan:
    """:func:`decode_prefix` of the 24 bytes at ``buf[offset:]`` (no slice is made)."""
    magic, version, kind, request_id, hlen, count, body_len = PREFIX.unpack_from(buf, offset)
    if (
        magic == MAGIC
        and version == VERSION
        and hlen <= limits.max_header_bytes
        and count <= limits.max_segments
        and body_len <= limits.max_frame_bytes
        and body_len >= (hlen + (-hlen % 8) + 8 * count if count else hlen)
    ):
        return FramePlan(kind, request_id, hlen, count, body_len)
    if magic != MAGIC:
        raise ProtocolException(f"not an rlmesh frame: magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ProtocolException(
            f"unsupported frame version {version}; this build speaks version {VERSION}"
        )
    if hlen > limits.max_header_bytes:
        raise ProtocolException(
            f"frame header of {hlen} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    if count > limits.max_segments:
        raise ProtocolException(f"frame has {count} segments; the limit is {limits.max_segments}")
    if body_len > limits.max_frame_bytes:
        raise ProtocolException(
            f"frame body of {body_len} bytes exceeds the limit of {limits.max_frame_bytes}"
        )
    if body_len < (
        hlen + (-hlen % 8) + 8 * count if count else hlen
    ):  # where the segment table ends
        raise ProtocolException(
            f"frame body of {body_len} bytes is shorter than its header and table"
        )
    return FramePlan(kind, request_id, hlen, count, body_len)


SMALL_BODY = 16 * 1024  # below this a body is a plain allocation (numpy aligns it to 16 bytes)


def new_body(plan: FramePlan) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A fresh buffer for the body a plan announces; 64-byte aligned unless small."""
    n = plan.body_len
    return np.empty(n, dtype=np.uint8) if n < SMALL_BODY else aligned_empty(n)


def split_body(plan: FramePlan, body: np.ndarray[Any, np.dtype[np.uint8]]) -> Frame:
    """Cut a filled body into header and segment views, checking the layout exactly.

    Raises:
        ProtocolException: the segment table disagrees with ``body_len``.
    """
    hlen, count = plan.header_len, plan.segment_count
    view = memoryview(body)  # type: ignore[arg-type]
    header = view[:hlen]
    if count == 1:  # the common case, without the loop
        start = hlen + (-hlen % 8)
        (n,) = _U64.unpack_from(view, start)
        pos = start + 8
        pos += -pos % SEGMENT_ALIGN
        if pos + n != plan.body_len:
            if n > plan.body_len - pos:
                raise ProtocolException(
                    f"segment of {n} bytes at offset {pos} runs past the frame body ({plan.body_len} bytes)"
                )
            raise ProtocolException(
                f"frame body is {plan.body_len} bytes but its layout ends at {pos + n}"
            )
        return Frame(plan.kind, plan.request_id, header, [body[pos : pos + n]])
    segments: list[np.ndarray[Any, np.dtype[np.uint8]]] = []
    if count:
        start = hlen + ((-hlen) % 8)
        lengths = _table(count).unpack_from(view, start)
        pos = start + 8 * count
        end = plan.body_len
        for n in lengths:
            pos += (-pos) % SEGMENT_ALIGN
            if n > end - pos:
                raise ProtocolException(
                    f"segment of {n} bytes at offset {pos} runs past the frame body ({end} bytes)"
                )
            segments.append(body[pos : pos + n])
            pos += n
    else:
        pos = hlen
    if pos != plan.body_len:
        raise ProtocolException(f"frame body is {plan.body_len} bytes but its layout ends at {pos}")
    return Frame(plan.kind, plan.request_id, header, segments)
