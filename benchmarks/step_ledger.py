"""The step's cost ledger: where each side's CPU per step goes, and where the wall time goes.

For each scenario (scalar CartPole; a 39-D float64 Box shaped like Meta-World's, whose
observation leaves its declared bounds every step and whose info carries 7 floats; a
224x224x3 image; 16 CartPole lanes; Meta-World ``reach-v3`` when ``metaworld`` is
installed) the env is served by ``rlmesh serve`` in a child process and stepped by a
numpy client in another. Each *pair* of runs, in alternating order:

- a **CPU run**, busy polling off (``RLMESH_BUSY_POLL_US=0``): each process's CPU per step
  from ``/proc/<pid>/task/*/schedstat``, split into phases by CPU-time sampling of both
  processes (``_ledger.py`` says how);
- a **wall run**, busy polling on (the default): the wall time per step;
- the env stepped **in-process** (CPU and wall per ``env.step``), back to back and with a
  sleep before each step as long as the served server's (a process that sleeps between
  steps finds its caches cold: the same env step then costs more CPU);
- the **raw-socket floor**: the same env served by a plain Python socket loop (one
  ``recv_into``, ``env.step``, one ``sendmsg``: no framing, no checks, no books), the least
  any Python server and client of that env can spend per step, and the **raw round trip**
  of a minimal socket ping-pong carrying the step's bytes (``raw_pingpong.py``).

Figures are medians over the pairs; a phase is its share of all pairs' samples times the
median CPU per step. The wall time is accounted for too: with polling off, a step's wall
time is the client's CPU, the server's CPU, and the hand-offs in between (the time
neither process runs: the kernel waking the other side). The goals (DESIGN, "Performance
budgets") are judged against figures of the same run.

    make bench-ledger
    python benchmarks/step_ledger.py --scenarios scalar,lanes16 --pairs 5
    python benchmarks/step_ledger.py --tree before=/tmp/base/src --tree after=src   # A/B

With ``--tree`` the children import rlmesh from that tree's ``src``; trees alternate within
each pair, so a before/after table comes from the same minutes on the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import served
from _ledger import CLIENT_PHASES, SCENARIOS, SERVER_PHASES
from raw_pingpong import raw_round_trip_us

HERE = Path(__file__).resolve().parent
LEDGER = [sys.executable, str(HERE / "_ledger.py")]
#: steps per CPU run (the wall run takes a third): enough samples at the kernel's tick
STEPS = {"scalar": 60_000, "box39": 40_000, "image": 20_000, "lanes16": 12_000, "metaworld": 8_000}
TITLES = {
    "scalar": "scalar CartPole",
    "box39": "39-D float64 Box (Meta-World's shape, out of bounds, 7-key info)",
    "image": "224x224x3 uint8 image + float32[16]",
    "lanes16": "16-lane vector CartPole (SyncVectorEnv)",
    "metaworld": "Meta-World reach-v3 (MuJoCo, state only)",
}


@contextlib.contextmanager
def _environ(tree: str | None, polling: bool) -> Iterator[dict[str, str]]:
    """The children's environment: rlmesh from ``tree``, busy polling on or off."""
    saved = dict(os.environ)
    paths = [str(HERE)] + ([str(Path(tree).resolve())] if tree else [])
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, saved.get("PYTHONPATH", "")])
    if polling:
        os.environ.pop("RLMESH_BUSY_POLL_US", None)
    else:
        os.environ["RLMESH_BUSY_POLL_US"] = "0"
    try:
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _child(args: list[str], env: dict[str, str], timeout: float = 900) -> dict[str, Any]:
    out = subprocess.run(
        [*LEDGER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def served_run(
    scenario: str, transport: str, steps: int, tree: str | None, polling: bool
) -> dict[str, Any]:
    """One served run: the CPU run (polling off, sampled) or the wall run (polling on)."""
    target = SCENARIOS[scenario][0]
    with (
        _environ(tree, polling) as env,
        tempfile.TemporaryDirectory(prefix="rlmesh-ledger-") as tmp,
    ):
        samples = f"{tmp}/samples.json"
        with served(target, transport, "--samples", samples, command=[*LEDGER, "serve"]) as addr:
            wall = ["--wall"] if polling else []
            return _child(["drive", scenario, addr, str(addr.pid), str(steps), samples, *wall], env)


def measure(
    scenario: str, transport: str, pairs: int, trees: dict[str, str | None], scale: float
) -> dict[str, Any]:
    """Every tree's runs of ``scenario``, interleaved; the raw floor once per pair."""
    steps = max(1000, int(STEPS[scenario] * scale))
    runs: dict[str, dict[str, list[Any]]] = {
        name: {"cpu": [], "wall": [], "inproc": [], "paused": []} for name in trees
    }
    floor: dict[str, list[Any]] = {"raw": [], "floor": [], "floor_wall": []}
    reply = SCENARIOS[scenario][3]
    loads = [os.getloadavg()[0]]
    for pair in range(pairs):
        order = list(trees.items())
        if pair % 2:
            order.reverse()
        for name, tree in order:
            kinds = [False, True] if pair % 2 == 0 else [True, False]
            for polling in kinds:
                n = steps // 3 if polling else steps
                runs[name]["wall" if polling else "cpu"].append(
                    served_run(scenario, transport, n, tree, polling)
                )
            cpu = runs[name]["cpu"][-1]
            gap = max(1.0, cpu["wall"] - cpu["server_cpu"])  # how long the server slept per step
            with _environ(tree, False) as env:
                inproc = ["inproc", scenario, str(steps // 4)]
                runs[name]["inproc"].append(_child(inproc, env))
                runs[name]["paused"].append(_child([*inproc, f"{gap:.1f}"], env))
        with _environ(None, False) as env:
            floor["floor"].append(_child(["rawdrive", scenario, str(steps // 2)], env))
            floor["floor_wall"].append(
                _child(["rawdrive", scenario, str(steps // 3), "--poll"], env)
            )
        floor["raw"].append(
            statistics.median(raw_round_trip_us(transport, 64, 2000, 3, reply=reply))
        )
        loads.append(os.getloadavg()[0])
        print(f"  {scenario}: pair {pair + 1}/{pairs} done", file=sys.stderr)
    return {"runs": runs, "floor": floor, "loads": loads}


def summarize(
    tree_runs: dict[str, list[Any]], floor: dict[str, list[Any]], inproc: dict[str, list[Any]]
) -> dict[str, Any]:
    """Medians over the pairs; the phases as shares of all samples times the median CPU.

    ``inproc``: the in-process runs of every tree (the env's step does not depend on the
    tree, so they are one sample).
    """
    med = statistics.median
    cpu, wall, inp = tree_runs["cpu"], tree_runs["wall"], inproc["inproc"]
    out: dict[str, Any] = {
        "server_cpu": med(r["server_cpu"] for r in cpu),
        "client_cpu": med(r["client_cpu"] - r["client_phases"].get("bench", 0.0) for r in cpu),
        "server_kernel": med(r["server_kernel"] for r in cpu),
        "client_kernel": med(r["client_kernel"] for r in cpu),
        "wall_off": med(r["wall"] for r in cpu),
        "wall_on": med(r["wall"] for r in wall),
        "env_cpu": med(r["cpu"] for r in inp),
        "env_wall": med(r["wall"] for r in inp),
        "env_paused": med(r["cpu"] for r in inproc["paused"]),
        "raw": med(floor["raw"]),
        "floor_server": med(r["server_cpu"] for r in floor["floor"]),
        "floor_client": med(r["client_cpu"] for r in floor["floor"]),
        "floor_wall_off": med(r["wall"] for r in floor["floor"]),
        "floor_wall_on": med(r["wall"] for r in floor["floor_wall"]),
        "pairs": len(cpu),
    }
    for side in ("server", "client"):
        shares: Counter[str] = Counter()
        samples = 0
        for r in cpu:
            phases = r[f"{side}_phases"]
            samples += int(phases.get("samples", 0))
            step = {k: v for k, v in phases.items() if k not in ("samples", "reset", "bench")}
            for k, v in step.items():
                shares[k] += v / sum(step.values()) / len(cpu)
        out[f"{side}_phases"] = {k: v * out[f"{side}_cpu"] for k, v in shares.items()}
        out[f"{side}_samples"] = samples
    out["handoff"] = out["wall_off"] - out["server_cpu"] - out["client_cpu"]
    return out


def _rows(labels: dict[str, str], summaries: dict[str, dict[str, Any]], side: str) -> list[str]:
    names = list(summaries)
    keys = list(labels) + sorted(
        {k for s in summaries.values() for k in s[f"{side}_phases"]} - set(labels)
    )
    lines = []
    for key in keys:
        values = [summaries[n][f"{side}_phases"].get(key) for n in names]
        if all(v is None for v in values):
            continue
        cells = " ".join(f"{v:>10.1f}" if v is not None else f"{'-':>10s}" for v in values)
        lines.append(f"  {labels.get(key, key):46s} {cells}")
    totals = " ".join(f"{summaries[n][f'{side}_cpu']:>10.1f}" for n in names)
    lines.append(f"  {'= CPU per step (schedstat)':46s} {totals}")
    kernel = " ".join(f"{summaries[n][f'{side}_kernel']:>10.1f}" for n in names)
    lines.append(f"  {'  of which in the kernel (/proc stime)':46s} {kernel}")
    return lines


def print_report(scenario: str, transport: str, result: dict[str, Any]) -> dict[str, Any]:
    runs = result["runs"].values()
    inproc = {k: [r for tree_runs in runs for r in tree_runs[k]] for k in ("inproc", "paused")}
    summaries = {
        name: summarize(tree_runs, result["floor"], inproc)
        for name, tree_runs in result["runs"].items()
    }
    names = list(summaries)
    head = " ".join(f"{n:>10s}" for n in names)
    first = summaries[names[0]]
    loads = ", ".join(f"{x:.1f}" for x in result["loads"])
    print(
        f"\n{TITLES[scenario]}, {transport}: medians of {first['pairs']} interleaved pairs "
        f"(load average {loads}); µs per step"
    )
    print(f"  {'server (polling off)':46s} {head}")
    print("\n".join(_rows(SERVER_PHASES, summaries, "server")))
    print(f"  {'client (polling off)':46s} {head}")
    print("\n".join(_rows(CLIENT_PHASES, summaries, "client")))
    print(f"  {'wall time':46s} {head}")
    for key, label in (
        ("wall_on", "wall per step, polling on"),
        ("wall_off", "wall per step, polling off"),
        ("handoff", "  of which hand-offs (neither side runs)"),
        ("env_cpu", "in-process env step, CPU"),
        ("env_wall", "in-process env step, wall"),
        ("env_paused", "in-process env step, CPU, after a sleep"),
        ("raw", "raw round trip, same bytes"),
        ("floor_server", "raw-socket floor: server CPU"),
        ("floor_client", "raw-socket floor: client CPU"),
        ("floor_wall_off", "raw-socket floor: wall, client sleeps"),
        ("floor_wall_on", "raw-socket floor: wall, client polls"),
    ):
        print(f"  {label:46s} " + " ".join(f"{summaries[n][key]:>10.1f}" for n in names))
    for name in names:
        print_goals(scenario, name, summaries[name])
    return summaries


def goals(scenario: str, s: dict[str, Any]) -> list[tuple[str, float, float]]:
    """``(goal, measured, limit)`` for the goals that concern ``scenario``."""
    if scenario == "scalar":
        return [
            ("server CPU <= env step + 15 µs", s["server_cpu"], s["env_cpu"] + 15),
            ("server CPU <= raw-socket floor + 15 µs", s["server_cpu"], s["floor_server"] + 15),
            ("client CPU <= 15 µs", s["client_cpu"], 15.0),
            (
                "wall <= raw round trip + env step + 15 µs",
                s["wall_on"],
                s["raw"] + s["env_wall"] + 15,
            ),
        ]
    if scenario == "lanes16":
        return [
            ("server CPU <= in-process vector step + 30 µs", s["server_cpu"], s["env_cpu"] + 30),
            ("server CPU <= raw-socket floor + 30 µs", s["server_cpu"], s["floor_server"] + 30),
        ]
    if scenario == "metaworld":
        return [
            ("wall <= 1.10x in-process step", s["wall_on"], 1.10 * s["env_wall"]),
            ("server CPU <= env step + 15 µs", s["server_cpu"], s["env_cpu"] + 15),
            ("server CPU <= raw-socket floor + 15 µs", s["server_cpu"], s["floor_server"] + 15),
        ]
    return []


def print_goals(scenario: str, name: str, s: dict[str, Any]) -> None:
    for text, got, limit in goals(scenario, s):
        verdict = "met" if got <= limit else "NOT met"
        print(f"  goal ({name}): {text}: {got:.1f} vs {limit:.1f} µs: {verdict}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    p.add_argument("--transport", default="tcp", choices=("tcp", "unix"))
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="multiply the steps per run")
    p.add_argument("--tree", action="append", default=[], help="NAME=path/to/src (repeatable)")
    p.add_argument("--json", help="write the summaries here")
    args = p.parse_args(argv)
    trees: dict[str, str | None] = {"this": None}
    if args.tree:
        trees = dict(t.split("=", 1) for t in args.tree)  # type: ignore[misc]
        for name, tree in trees.items():  # a checkout's root would import the installed rlmesh
            if not (Path(str(tree)) / "rlmesh" / "__init__.py").is_file():
                p.error(
                    f"--tree {name}={tree}: not a src directory holding rlmesh/ (try {tree}/src)"
                )
    report = {}
    print(f"load average before: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    for scenario in args.scenarios.split(","):
        if scenario == "metaworld" and not _has_metaworld():
            print("\nMeta-World reach-v3: skipped (pip install metaworld mujoco to measure it)")
            continue
        result = measure(scenario, args.transport, args.pairs, trees, args.scale)
        report[scenario] = print_report(scenario, args.transport, result)
        report[scenario]["raw_runs"] = result  # every run, to summarize again
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def _has_metaworld() -> bool:
    import importlib.util

    return importlib.util.find_spec("metaworld") is not None


if __name__ == "__main__":
    main()
