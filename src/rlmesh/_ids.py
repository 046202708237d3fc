"""Identifiers: episode ids and connection ids, minted in one place.

- :func:`new_episode_id`: a runtime episode id, a UUIDv7 string (AR-3): what the client
  mints per lane on reset and what the serve driver mints for an autoreset lane.
- :func:`new_local_episode_id`: a local-session episode id, ``uuid4().hex`` (32 hex
  digits, no dashes; DELTA-31): ``Model.session(local_env)`` and the local eval loop.
- :func:`uuid7`: the UUIDv7 itself (also a connection's id, CLT-7).
"""

from __future__ import annotations

import os
import random
import time
import uuid

__all__ = ["new_episode_id", "new_local_episode_id", "uuid7"]

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


def new_episode_id() -> str:
    """A runtime episode id: a UUIDv7 string (AR-3), minted by the client/driver side, never the env."""
    return uuid7()


def new_local_episode_id() -> str:
    """A local-session episode id: ``uuid4().hex`` (DELTA-31: 32 hex digits, no dashes)."""
    return uuid.uuid4().hex
