"""Identifiers: UUIDv7 strings for episodes and connections (AR-3, CLT-7)."""

from __future__ import annotations

import os
import random
import time

__all__ = ["uuid7"]

# Ids need uniqueness, not secrecy: a PRNG seeded from the OS once per process avoids
# a getrandom() syscall per id (ids are minted on the step path when lanes autoreset).
_rng = random.Random(int.from_bytes(os.urandom(16), "big"))


def _reseed() -> None:  # a forked child must not repeat its parent's sequence
    _rng.seed(int.from_bytes(os.urandom(16), "big"))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


_RAND_MASK = ((1 << 80) - 1) & ~(0xF << 76) & ~(0b11 << 62)  # clear the version and variant bits
_FIXED = 0x7 << 76 | 0b10 << 62  # version 7, variant 10


def uuid7() -> str:
    """A time-ordered UUIDv7 string (RFC 9562: 48-bit ms timestamp, version 7, variant 10)."""
    ms = time.time_ns() // 1_000_000
    h = "%032x" % ((ms & 0xFFFFFFFFFFFF) << 80 | (_rng.getrandbits(80) & _RAND_MASK) | _FIXED)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
