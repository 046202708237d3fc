"""Benchmark: ``Adapter.transform_obs`` / ``transform_action`` for a typical VLA pairing.

The env publishes a 480x640x3 uint8 camera, eef position (3), eef quaternion
(quat_xyzw, 4), gripper (1) and an instruction; its action is delta pos (3) +
axis-angle (3) + gripper (1). The model wants a 224x224 image (stretch
resize, default ``bilinear``), ``Concat(EEF_POS, State(EEF_ROT, rot6d),
GRIPPER_POS)``, the instruction, and emits delta pos (3) + rot6d (6) +
gripper (1).

Run: ``python benchmarks/bench_adapters.py [--reps N] [--resample bilinear_aa]``.
Prints the median microseconds per observation / action over ``reps`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import numpy as np

import rlmesh.adapters as adapt


@dataclass
class Args:
    reps: int = 300
    """How many timed calls (after warm-up)."""
    resample: str = "bilinear"
    """Image resample kernel for the model input."""
    fit: str = "stretch"
    """Fit mode for the 480x640 -> 224x224 aspect change."""


def make_pairing(args: Args) -> tuple[adapt.Adapter, dict[str, object], np.ndarray]:
    tags = adapt.EnvTags(
        observation={
            "rgb": adapt.ImageTag(adapt.IMAGE_PRIMARY),
            "ee_pos": adapt.StateTag(adapt.EEF_POS),
            "ee_quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
            "grip": adapt.StateTag(adapt.GRIPPER_POS),
            "goal": adapt.TextTag(adapt.INSTRUCTION),
        },
        action=adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
            adapt.Actuator(adapt.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
            clip=(-1.0, 1.0),
        ),
    )
    spec = adapt.ModelSpec(
        input={
            "image": adapt.Image(
                adapt.IMAGE_PRIMARY, size=224, resample=args.resample, fit=args.fit
            ),
            "proprio": adapt.Concat(
                adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d"), adapt.GRIPPER_POS
            ),
            "task": adapt.Text(adapt.INSTRUCTION),
        },
        output=adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, dim=6, encoding="rot6d"),
            adapt.Actuator(adapt.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
        ),
    )
    box = {"kind": "box", "dtype": "float32"}
    obs_space = {
        "kind": "dict",
        "keys": ["rgb", "ee_pos", "ee_quat", "grip", "goal"],
        "children": [
            {"kind": "box", "dtype": "uint8", "shape": [480, 640, 3], "low": [0], "high": [255]},
            {**box, "shape": [3]},
            {**box, "shape": [4]},
            {**box, "shape": [1]},
            {"kind": "text"},
        ],
    }
    act_space = {**box, "shape": [7], "low": [-1.0], "high": [1.0]}
    adapter = adapt.resolve(tags, obs_space, act_space, spec)
    rng = np.random.default_rng(0)
    obs = {
        "rgb": rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8),
        "ee_pos": np.array([0.1, -0.2, 0.3], dtype=np.float32),
        "ee_quat": np.array([0.0, 0.0, 0.38268343, 0.92387953], dtype=np.float32),
        "grip": np.array([0.04], dtype=np.float32),
        "goal": "put the cup on the plate",
    }
    out = rng.uniform(-1, 1, size=10).astype(np.float32)
    out[3:9] = [1, 0, 0, 0, 1, 0]
    return adapter, obs, out


def time_us(fn: object, arg: object, reps: int) -> float:
    call = fn  # type: ignore[assignment]
    for _ in range(min(20, reps)):
        call(arg)  # type: ignore[operator]
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        call(arg)  # type: ignore[operator]
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=Args.reps)
    parser.add_argument("--resample", default=Args.resample)
    parser.add_argument("--fit", default=Args.fit)
    ns = parser.parse_args()
    args = Args(ns.reps, ns.resample, ns.fit)
    adapter, obs, out = make_pairing(args)
    print(adapter.describe())
    print()
    obs_us = time_us(adapter.transform_obs, obs, args.reps)
    act_us = time_us(adapter.transform_action, out, args.reps)
    print(
        f"transform_obs    : {obs_us:9.1f} us/obs   (480x640x3 -> 224x224 {args.resample}, {args.fit})"
    )
    print(f"transform_action : {act_us:9.1f} us/action")


if __name__ == "__main__":
    main()
