"""Header decoding alone: what the nesting bound (issue 18, defect 1) costs per received frame.

Every received frame's header passes ``rlmesh.wire.decode_header``, where the nesting of
a header is bounded. This times that call for the headers of the hot path (a Step
request, scalar and vector StepReplies, a Reset with options) and for one large
handshake header (an elementwise-bounded contract, where the exact nesting measure runs).
Reported: the minimum over repetitions of the mean per call (minimums resist the noise
of a shared machine). Run it against two builds in the same session to compare, e.g.
``PYTHONPATH=/path/to/other/src python bench_header.py``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlmesh.wire import messages as m
from rlmesh.wire.frames import Frame


def _frame(msg: Any) -> Frame:
    return Frame(msg.KIND, 1, memoryview(m._ENCODER.encode(msg)), [])


def _cases() -> dict[str, Frame]:
    record = m.EpisodeRecord("0193abcd", 3, 0, 200, 200.0, False, True, 1, 2, None)
    bounds = np.random.default_rng(0).standard_normal(224 * 224).tolist()
    contract = {
        "observation_space": {
            "kind": "box",
            "shape": [224, 224],
            "details": {"low": bounds, "high": bounds},
        }
    }
    return {
        "Step request (Discrete action)": _frame(m.Step(action=[1])),
        "StepReply scalar": _frame(m.StepReply(obs=[], reward=1.0, info=None)),
        "StepReply with info": _frame(
            m.StepReply(obs=[], reward=1.0, info={"x": 1.0, "flag": True, "names": ["a", "b"]})
        ),
        "StepReply vector, 1 completed": _frame(m.StepReply(obs=[], completed=[record])),
        "Reset with options": _frame(
            m.Reset(seeds=[0], options={"difficulty": 3, "task": "reach"}, episode_ids=["e"])
        ),
        "Welcome, 50k-float contract": _frame(
            m.Welcome(
                generation="g",
                peer=m.PeerInfo(),
                editions=["2026.06"],
                preferred=None,
                selected="2026.06",
                session_id="s",
                contract=contract,
            )
        ),
    }


def bench(n: int, reps: int) -> dict[str, float]:
    out: dict[str, float] = {}
    decode = m.decode_header
    for name, frame in _cases().items():
        count = n if len(frame.header) < 4096 else max(3, n // 20_000)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(count):
                decode(frame)
            best = min(best, (time.perf_counter() - t0) / count)
        unit, scale = ("us", 1e6) if best > 1e-5 else ("ns", 1e9)
        print(f"{name:40s} {best * scale:10.1f} {unit}   ({len(frame.header)} header bytes)")
        out[name] = best
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    return bench(args.n, args.reps)


if __name__ == "__main__":
    main()
