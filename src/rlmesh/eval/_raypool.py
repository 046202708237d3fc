"""The ``ray`` backend: one Ray actor per worker (the ``ray`` extra; ``ray`` is imported on use).

The run uses the Ray this process already initialized, connects to ``Workers(address=...)``
(``"auto"`` or an address), or starts a local Ray and shuts it down when the run ends.
Every actor gets the pickled job once (``ray.put``), builds its env and model in
``setup`` and runs one episode per ``run`` call; actors are created with
``max_restarts=0`` so a lost actor (killed process, removed node) surfaces as a
``RayActorError`` on its pending call, which the driver turns into a retry elsewhere.
Each actor asks for ``resources`` (``{"CPU": 1, "GPU": 0.5, "my_res": 1}``); by default an
equal share of the cluster's CPUs, at most one, so ``n`` workers always fit.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from ..errors import DependencyMissing
from ._job import WorkerCore, portable_error
from ._journal import JournalSpec
from ._workers import Workers

__all__ = ["RayBackend", "RayWorker", "import_ray"]

#: Seconds the actors get to close their envs at the end of a run before they are killed.
STOP_GRACE_SECONDS = 5.0


def import_ray() -> Any:
    """``import ray``, or a :class:`~rlmesh.errors.DependencyMissing` naming the extra."""
    try:
        import ray
    except ImportError as exc:
        raise DependencyMissing(
            f"workers= with backend='ray' needs Ray ({exc}): pip install ray (the \"ray\" extra of rlmesh-py), "
            "or use rlmesh.Workers(n, backend='processes')",
            name="ray",
        ) from exc
    return ray


class RayWorker:
    """The actor body (wrapped with ``ray.remote`` by :class:`RayBackend`)."""

    def __init__(self, job_bytes: bytes, slot: int, label: str, journal: tuple[str, str] | None = None) -> None:
        # Nothing that can fail here: an error in an actor's constructor reads as a lost
        # actor; setup() reports it as the error it is.
        self.args = (job_bytes, slot, label, journal)
        self.label = label
        self.core: Any = None
        self.broken = False

    def setup(self) -> tuple[Any, ...]:
        job_bytes, slot, label, journal = self.args
        try:
            # On the driver's host the actor journals its own episodes (as process workers
            # do); elsewhere the driver records what it reports.
            opened = None
            if journal is not None and journal[1] == socket.gethostname() and os.path.exists(journal[0]):
                opened = JournalSpec(journal[0]).open()
            self.core = WorkerCore(job_bytes, slot, label, opened)
            return ("ready", self.core.setup())
        except Exception as exc:
            return ("setup_failed", portable_error(exc, f"worker {label} setting up"))

    def run(self, index: int, seed: int | None, trial: int) -> tuple[Any, ...]:
        if self.broken:  # the env may be unusable after an error: rebuild it
            self.core.close()
            self.core.setup()
            self.broken = False
        try:
            return ("done", self.core.run(index, seed, trial))
        except Exception as exc:
            self.broken = True
            return ("failed", index, portable_error(exc, self.core.where))

    def close(self) -> None:
        if self.core is not None:
            self.core.close()


_ACTOR: Any = None


def _actor_class() -> Any:
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = import_ray().remote(RayWorker)
    return _ACTOR


def ray_start(address: str | None) -> tuple[bool, float]:
    """Initialize Ray unless it is; ``(we started it, seconds it took)``."""
    ray = import_ray()
    if ray.is_initialized():
        return False, 0.0
    t0 = time.perf_counter()
    ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=False)
    return True, time.perf_counter() - t0


class RayBackend:
    """Driver side of the Ray backend (same events as the processes backend)."""

    name = "ray"

    def __init__(self, job_bytes: bytes, cfg: Workers, expected: int = 1, journal_path: str | None = None) -> None:
        ray = import_ray()
        self.ray = ray
        self.cfg = cfg
        self.expected = expected
        self.journal = (journal_path, socket.gethostname()) if journal_path is not None else None
        self.owns_ray, self.startup_seconds = ray_start(cfg.address)
        self.job_ref = ray.put(job_bytes)
        self.actors: dict[int, Any] = {}
        self.labels: dict[int, str] = {}
        self.nodes: dict[int, str] = {}
        self.dead: set[int] = set()
        self.refs: dict[Any, int] = {}

    def _options(self) -> dict[str, Any]:
        res = dict(self.cfg.resources) if self.cfg.resources is not None else None
        opts: dict[str, Any] = {"max_restarts": 0, "max_task_retries": 0}
        if res is None:
            cpus = float(self.ray.cluster_resources().get("CPU", 1.0))
            opts["num_cpus"] = min(1.0, cpus / max(1, self.expected))
            return opts
        opts["num_cpus"] = float(res.pop("CPU", 1.0))
        if "GPU" in res:
            opts["num_gpus"] = float(res.pop("GPU"))
        if res:
            opts["resources"] = {k: float(v) for k, v in res.items()}
        return opts

    def spawn(self, slot: int, label: str) -> None:
        actor = _actor_class().options(**self._options()).remote(self.job_ref, slot, label, self.journal)
        self.actors[slot] = actor
        self.labels[slot] = label
        self.dead.discard(slot)
        self.refs[actor.setup.remote()] = slot

    def submit(self, slot: int, task: tuple[int, int | None, int]) -> bool:
        if slot in self.dead or slot not in self.actors:
            return False
        self.refs[self.actors[slot].run.remote(*task)] = slot
        return True

    def alive(self) -> int:
        return sum(1 for slot in self.actors if slot not in self.dead)

    def poll(self, timeout: float) -> list[tuple[Any, ...]]:
        if not self.refs:
            time.sleep(min(timeout, 0.05))
            return []
        ray = self.ray
        pending = list(self.refs)
        ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:
            more, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            ready = list({id(r): r for r in [*ready, *more]}.values())
        events: list[tuple[Any, ...]] = []
        for ref in ready:
            slot = self.refs.pop(ref, None)
            if slot is None or slot in self.dead:
                continue  # dropped with its worker, lost earlier in this batch
            try:
                kind, *rest = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the call itself failed to run
                events.append(("setup_failed", slot, exc.as_instanceof_cause()))
                continue
            except ray.exceptions.RayError as exc:  # the actor is gone (killed, node lost, ...)
                self._mark_dead(slot)
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                node = self.nodes.get(slot, "")
                where = f" on node {node[:12]}" if node else ""
                events.append(("lost", slot, f"worker {self.labels[slot]}{where} lost: {type(exc).__name__}: {text}"))
                continue
            if kind == "ready":
                self.nodes[slot] = str(rest[0].get("node", ""))
            events.append((kind, slot, *rest))
        return events

    def _mark_dead(self, slot: int) -> None:
        self.dead.add(slot)
        actor = self.actors.get(slot)
        if actor is not None:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:
                pass
        for ref, s in list(self.refs.items()):
            if s == slot:
                del self.refs[ref]

    def kill(self, slot: int) -> None:
        self._mark_dead(slot)

    def close(self, *, force: bool) -> None:
        ray = self.ray
        live = [slot for slot in self.actors if slot not in self.dead]
        try:
            if not force and live:
                refs = [self.actors[slot].close.remote() for slot in live]
                ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_SECONDS)
        except Exception:
            pass
        for slot in live:
            self._mark_dead(slot)
        self.refs.clear()
        if self.owns_ray:
            ray.shutdown()
