"""Meta-World served, sandboxed and evaluated at scale: the figures of docs/suites.md.

Same-run, interleaved pairs, medians (the machine is 2 shared cores: one timing swings 2x):

1. ``success``: scripted success per MT10 task, in-process vs served (one ``rlmesh serve`` per
   task, driven over a unix socket) vs ``workers=2``: identical per seed? and against the
   published expert success (>= 0.9 per task);
2. ``overhead``: one env step in-process vs served (TCP and unix), state only, for the raw
   Gymnasium id ``Meta-World/MT1`` and the suite env; and with a 128x128 camera every step;
3. ``scale``: MT10 x N episodes, ``workers=2`` vs one process (speed-up, episodes per hour);
4. ``render``: one rendered frame per size, and a camera step with ``render_every`` k.

    python benchmarks/bench_metaworld.py [--sections success,overhead,scale,render] [--quick]

Writes a JSON document with every figure (``--json PATH``) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import served

import rlmesh
import rlmesh.numpy as rn
from rlmesh import suites
from rlmesh.suites import metaworld as mw

warnings.filterwarnings("ignore")
os.environ.setdefault("MUJOCO_GL", "osmesa")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (2 cores)"


def _key(result: Any) -> list[tuple[Any, ...]]:
    return [(e.seed, e.steps, e.success, round(e.reward, 9)) for e in result.episodes]


# -- 1. success --------------------------------------------------------------------------------


def success(episodes: int, tasks: tuple[str, ...]) -> dict[str, Any]:
    local = suites.run("scripted", "metaworld", tasks=list(tasks), episodes_per_task=episodes)
    workers = suites.run(
        "scripted", "metaworld", tasks=list(tasks), episodes_per_task=episodes, workers=2
    )
    out: dict[str, Any] = {}
    for task in tasks:
        kwargs = json.dumps({"task": task})
        with served("rlmesh.suites.metaworld:MetaWorld", "unix", "--kwargs-json", kwargs) as addr:
            res = rlmesh.run(mw.scripted(task), addr, seeds=mw.seeds(task, episodes))
        a, w = local[task], workers[task]
        out[task] = {
            "in_process": a.success_rate,
            "served": sum(1 for e in res.episodes if e.success) / len(res.episodes),
            "workers2": w.success_rate,
            "identical_per_seed": _key(a.result) == _key(res) == _key(w.result),
            "mean_steps": statistics.fmean(e.steps for e in a.result.episodes),
        }
        print(f"  {task:26s} {out[task]}", flush=True)
    return out


# -- 2. overhead ---------------------------------------------------------------------------------


def _actions(task: str, n: int, make: Any) -> list[np.ndarray[Any, Any]]:
    """The scripted policy's actions of one rollout (replayed open loop: the env is deterministic)."""
    env, policy = make(), mw.scripted(task)
    obs, _ = env.reset(seed=0)
    acts = []
    for _ in range(n):
        a = policy.predict(obs)
        acts.append(a)
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset(seed=0)
    env.close()
    return acts


def _time_steps(env: Any, acts: list[np.ndarray[Any, Any]]) -> float:
    """Mean seconds per ``env.step`` over the action list (resets excluded)."""
    env.reset(seed=0)
    total = 0.0
    for a in acts:
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        total += time.perf_counter() - t0
        if term or trunc:
            env.reset(seed=0)
    return total / len(acts)


def _gym_mt1() -> Any:
    from rlmesh._gymid import make_gym_env  # imports metaworld, which registers Meta-World/MT1

    return make_gym_env("Meta-World/MT1", env_name="reach-v3", seed=7)


def overhead(rounds: int, steps: int) -> dict[str, Any]:
    task = "reach-v3"
    cases: dict[str, tuple[Any, str, list[str]]] = {
        "gym Meta-World/MT1 (state)": (
            _gym_mt1,
            "Meta-World/MT1",
            ["--kwargs-json", json.dumps({"env_name": task, "seed": 7})],
        ),
        "suite env (state)": (
            lambda: mw.make_env(task, terminate_on_success=False),
            "rlmesh.suites.metaworld:MetaWorld",
            ["--kwargs-json", json.dumps({"task": task, "terminate_on_success": False})],
        ),
        "suite env, 128x128 camera every step": (
            lambda: mw.make_env(task, camera="corner", image_size=128, terminate_on_success=False),
            "rlmesh.suites.metaworld:MetaWorld",
            [
                "--kwargs-json",
                json.dumps(
                    {
                        "task": task,
                        "camera": "corner",
                        "image_size": 128,
                        "terminate_on_success": False,
                    }
                ),
            ],
        ),
    }
    out: dict[str, Any] = {}
    for name, (make, target, extra) in cases.items():
        n = steps if "camera" not in name else max(20, steps // 10)
        acts = _actions(task, n, make)
        local = make()
        row: dict[str, Any] = {"steps_per_round": n}
        for transport in ("unix", "tcp"):
            with served(target, transport, *extra) as addr:
                remote = rn.RemoteEnv(addr)
                _time_steps(local, acts[: n // 5])
                _time_steps(remote, acts[: n // 5])  # warm-up
                pairs = []
                for _ in range(rounds):  # interleaved: in-process, served, in-process, ...
                    a = _time_steps(local, acts)
                    b = _time_steps(remote, acts)
                    pairs.append((a, b))
                remote.close()
            ratios = [b / a for a, b in pairs]
            row[transport] = {
                "in_process_us": statistics.median(a for a, _ in pairs) * 1e6,
                "served_us": statistics.median(b for _, b in pairs) * 1e6,
                "ratio_median": statistics.median(ratios),
                "ratios": [round(r, 3) for r in ratios],
            }
        local.close()
        out[name] = row
        print(f"  {name}: {row}", flush=True)
    return out


# -- 3. scale ------------------------------------------------------------------------------------


def scale(rounds: int, episodes: int) -> dict[str, Any]:
    """One process vs ``workers=2`` started for the run (cold: the workers start, import
    Meta-World and build every task's env inside the timed run) vs a warm pool (started
    before the timed run, as when one pool evaluates several checkpoints), interleaved."""
    pairs = []
    pool = rlmesh.Workers(n=2).start()
    try:
        suites.run("scripted", "metaworld:MT10", episodes_per_task=1, workers=pool)  # warm it
        for _ in range(rounds):
            one = suites.run("scripted", "metaworld:MT10", episodes_per_task=episodes)
            two = suites.run("scripted", "metaworld:MT10", episodes_per_task=episodes, workers=2)
            warm = suites.run(
                "scripted", "metaworld:MT10", episodes_per_task=episodes, workers=pool
            )
            pairs.append((one.seconds, two.seconds, warm.seconds, one.episodes))
            print(
                f"  one process {one.seconds:.2f}s, workers=2 {two.seconds:.2f}s, "
                f"warm pool of 2 {warm.seconds:.2f}s",
                flush=True,
            )
    finally:
        pool.close()
    eps = pairs[0][3]
    one_s = statistics.median(p[0] for p in pairs)
    two_s = statistics.median(p[1] for p in pairs)
    warm_s = statistics.median(p[2] for p in pairs)
    return {
        "episodes": eps,
        "one_process_s": one_s,
        "workers2_s": two_s,
        "warm_pool2_s": warm_s,
        "speedup_median": statistics.median(p[0] / p[1] for p in pairs),
        "speedup_warm_median": statistics.median(p[0] / p[2] for p in pairs),
        "episodes_per_hour_one": eps / one_s * 3600,
        "episodes_per_hour_workers2": eps / two_s * 3600,
        "episodes_per_hour_warm_pool2": eps / warm_s * 3600,
        "pairs": pairs,
    }


# -- 4. render -----------------------------------------------------------------------------------


def render(reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": os.environ.get("MUJOCO_GL")}
    for size in (64, 128, 224):
        env = mw.make_env("reach-v3", camera="corner", image_size=size)
        env.reset(seed=0)
        env.render()  # the first frame creates the GL context
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            env.render()
            times.append(time.perf_counter() - t0)
        env.close()
        out[f"frame_{size}_ms"] = statistics.median(times) * 1e3
    acts = _actions("reach-v3", 60, lambda: mw.make_env("reach-v3", terminate_on_success=False))
    for k in (1, 2, 5, 10):
        env = mw.make_env("reach-v3", camera="corner", image_size=128, render_every=k)
        out[f"step_128_every_{k}_ms"] = _time_steps(env, acts) * 1e3
        env.close()
    state = mw.make_env("reach-v3", terminate_on_success=False)
    out["step_state_only_ms"] = _time_steps(state, acts) * 1e3
    state.close()
    print(f"  {out}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", default="success,overhead,scale,render")
    p.add_argument("--quick", action="store_true", help="few rounds and episodes (a smoke run)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    sections = args.sections.split(",")
    rounds = 2 if args.quick else args.rounds
    episodes = 2 if args.quick else args.episodes
    doc: dict[str, Any] = {"load_start": load(), "mujoco_gl": os.environ.get("MUJOCO_GL")}
    print(f"load {doc['load_start']}, MUJOCO_GL={doc['mujoco_gl']}", flush=True)
    if "success" in sections:
        print("success (scripted, MT10):", flush=True)
        doc["success"] = success(episodes, mw.MT10 if not args.quick else mw.MT10[:2])
    if "overhead" in sections:
        print("step overhead (served / in-process, medians of interleaved rounds):", flush=True)
        doc["overhead"] = overhead(rounds, 100 if args.quick else 500)
    if "scale" in sections:
        doc["scale"] = {}
        for n in [episodes] if args.quick else [episodes, 3 * episodes]:
            print(f"scale: MT10 x {n} episodes, workers=2 vs one process:", flush=True)
            doc["scale"][n] = scale(1 if args.quick else 3, n)
            print(f"  {doc['scale'][n]}", flush=True)
    if "render" in sections:
        print("render:", flush=True)
        doc["render"] = render(5 if args.quick else 20)
    doc["load_end"] = load()
    print(f"load {doc['load_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
