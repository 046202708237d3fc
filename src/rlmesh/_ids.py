"""Identifiers: UUIDv7 strings for episodes and connections (AR-3, CLT-7)."""

from __future__ import annotations

import os
import random
import time

__all__ = ["uuid7"]

# Ids need uniqueness, not secrecy: a PRNG seeded from the OS once per process avoids
# a getrandom() syscall per id (ids are minted on the step path when lanes autoreset).
_rng = random.Random(int.from_bytes(os.urandom(16), "big"))
_pid = os.getpid()


def uuid7() -> str:
    """A time-ordered UUIDv7 string (RFC 9562: 48-bit ms timestamp, version 7, variant 10)."""
    global _rng, _pid
    if os.getpid() != _pid:  # a forked child must not repeat its parent's sequence
        _pid = os.getpid()
        _rng = random.Random(int.from_bytes(os.urandom(16), "big"))
    ms = time.time_ns() // 1_000_000
    rand = _rng.getrandbits(74)
    value = (ms & 0xFFFFFFFFFFFF) << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
