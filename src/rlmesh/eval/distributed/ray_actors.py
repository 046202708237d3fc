"""The ``ray`` backend: one Ray actor per worker (the ``ray`` extra; ``ray`` is imported on use).

The run uses the Ray this process already initialized, connects to ``Workers(address=...)``
(``"auto"`` or an address), or starts a local Ray on loopback and shuts it down when the
run ends (:func:`rlmesh._spawn.ray.init_ray`, the one place Ray is started).
Every run puts its pickled job once (``ray.put``); each actor gets it in ``setup``, builds
its env and model (closing a previous run's), runs one episode per ``run`` call and, in a
:class:`~rlmesh.eval.WorkerPool`, closes them on ``release`` and waits for the next run; actors are created with
``max_restarts=0`` so a lost actor (killed process, removed node) surfaces as a
``RayActorError`` on its pending call, which the driver turns into a retry elsewhere.
Each actor asks for ``resources`` (``{"CPU": 1, "GPU": 0.5, "my_res": 1}``); by default an
equal share of the cluster's CPUs, at most one, so ``n`` workers always fit.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..._spawn.ray import import_ray, init_ray
from .backend import Event, Task
from .host import WorkerHost, worker_info
from .journal import JournalSpec

if TYPE_CHECKING:
    from .workers import Workers

__all__ = ["RayBackend", "RayWorker"]

#: Seconds the actors get to close their envs at the end of a run before they are killed.
STOP_GRACE_SECONDS = 5.0
#: Seconds the driver waits for the replies of a lost actor's other calls (each resolves at
#: once: to the episode it finished before it died, or to the same lost-actor error).
SALVAGE_SECONDS = 5.0


def _import_ray() -> Any:
    return import_ray(
        "workers= with backend='ray'", alternative="use rlmesh.Workers(n, backend='processes')"
    )


class RayWorker:
    """The actor body (wrapped with ``ray.remote`` by :class:`RayBackend`): one :class:`WorkerHost`."""

    def __init__(self) -> None:
        # Nothing that can fail here: an error in an actor's constructor reads as a lost
        # actor; setup() reports it as the error it is.
        self.host = WorkerHost()

    def hello(self) -> dict[str, Any]:
        return worker_info()

    def setup(
        self, job_bytes: bytes, slot: int, label: str, journal: tuple[str, str] | None = None
    ) -> tuple[Any, ...]:
        opener = None
        # On the driver's host the actor journals its own episodes (as process workers
        # do); elsewhere the driver records what it reports.
        if (
            journal is not None
            and journal[1] == socket.gethostname()
            and os.path.exists(journal[0])
        ):
            opener = JournalSpec(journal[0]).open
        return self.host.setup(job_bytes, slot, label, opener)

    def run(self, index: int, seed: int | None, trial: int) -> tuple[Any, ...]:
        return self.host.run(index, seed, trial)

    def release(self) -> tuple[Any, ...]:
        return self.host.release()

    def close(self) -> None:
        self.host.release()


_ACTOR: Any = None


def _actor_class() -> Any:
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = _import_ray().remote(RayWorker)
    return _ACTOR


class RayBackend:
    """Driver side of the Ray backend (a :class:`~.backend.WorkerBackend`, like the processes backend)."""

    name = "ray"

    def __init__(self, cfg: Workers, expected: int = 1) -> None:
        ray = _import_ray()
        self.ray = ray
        self.cfg = cfg
        self.expected = expected
        self.journal: tuple[str, str] | None = None
        self.owns_ray, self.startup_seconds = init_ray(cfg.address, log_to_driver=False)
        self.job_ref: Any = None
        self.actors: dict[int, Any] = {}
        self.labels: dict[int, str] = {}
        self.nodes: dict[int, str] = {}
        self.dead: set[int] = set()
        self.refs: dict[Any, int] = {}

    def set_job(self, job_bytes: bytes, journal_path: str | None) -> None:
        self.job_ref = self.ray.put(job_bytes)
        self.journal = (journal_path, socket.gethostname()) if journal_path is not None else None

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
        """Create an actor in ``slot`` (replacing a dead one); it holds no job yet."""
        self.actors[slot] = _actor_class().options(**self._options()).remote()
        self.labels[slot] = label
        self.nodes.pop(slot, None)
        self.dead.discard(slot)

    def has_worker(self, slot: int) -> bool:
        return slot in self.actors and slot not in self.dead

    def assign(self, slot: int, label: str) -> bool:
        if not self.has_worker(slot):
            return False
        self.labels[slot] = label
        self.refs[self.actors[slot].setup.remote(self.job_ref, slot, label, self.journal)] = slot
        return True

    def submit(self, slot: int, task: Task) -> bool:
        if slot in self.dead or slot not in self.actors:
            return False
        self.refs[self.actors[slot].run.remote(*task)] = slot
        return True

    def alive(self, slots: Iterable[int] | None = None) -> int:
        """Live actors (of ``slots`` only, when given)."""
        wanted = set(self.actors) if slots is None else set(slots)
        return sum(1 for slot in self.actors if slot not in self.dead and slot in wanted)

    def poll(self, timeout: float) -> list[Event]:
        if not self.refs:
            time.sleep(min(timeout, 0.05))
            return []
        ray = self.ray
        pending = list(self.refs)
        ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:
            more, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            ready = list({id(r): r for r in [*ready, *more]}.values())
        events: list[Event] = []
        lost: dict[int, BaseException] = {}
        for ref in ready:
            slot = self.refs.get(ref)
            if slot is None or slot in self.dead or slot in lost:
                continue  # dropped with its worker earlier, or read below with the rest of its calls
            del self.refs[ref]
            try:
                events.append(self._event(slot, ray.get(ref)))
            except ray.exceptions.RayTaskError as exc:  # the call itself failed to run
                events.append(("setup_failed", slot, exc.as_instanceof_cause()))
            except ray.exceptions.RayError as exc:  # the actor is gone (killed, node lost, ...)
                lost[slot] = exc
        for slot, error in lost.items():
            events.extend(self._salvage(slot))
            events.append(("lost", slot, self._lost(slot, error)))
        return events

    def _event(self, slot: int, reply: tuple[Any, ...]) -> Event:
        kind, *rest = reply
        if kind == "ready":
            self.nodes[slot] = str(rest[0].get("node", ""))
        return (kind, slot, *rest)

    def _salvage(self, slot: int) -> list[Event]:
        """What a lost actor finished before it died, in the order it was asked.

        An actor runs its calls in order: one that returned before the actor died holds its
        reply (an episode finished, its result kept, not re-run), and the first that did
        not is the episode the actor was running when it died.
        """
        ray = self.ray
        calls = [ref for ref, s in self.refs.items() if s == slot]
        if not calls:
            return []
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=SALVAGE_SECONDS)
        answered = set(ready)
        events: list[Event] = []
        for ref in calls:
            if ref not in answered:
                break
            try:
                reply = ray.get(ref)
            except ray.exceptions.RayError:
                break  # this call died with the actor, and so did every later one
            del self.refs[ref]
            events.append(self._event(slot, reply))
        return events

    def _lost(self, slot: int, exc: BaseException) -> str:
        self._mark_dead(slot)
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        node = self.nodes.get(slot, "")
        where = f" on node {node[:12]}" if node else ""
        return f"worker {self.labels[slot]}{where} lost: {type(exc).__name__}: {text}"

    def wait_started(self, slots: list[int], timeout: float) -> None:
        """Block until every actor in ``slots`` runs (its process is up and has imported rlmesh).

        Raises:
            TimeoutError: not within ``timeout`` seconds (are the requested resources available?).
            RuntimeError: an actor died while starting.
        """
        ray = self.ray
        refs = [self.actors[s].hello.remote() for s in slots]
        ready, rest = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if rest:
            raise TimeoutError(
                f"{len(rest)} of {len(refs)} Ray actor(s) did not start within {timeout:.0f}s "
                "(are the requested resources available in the cluster?)"
            )
        try:
            ray.get(ready)
        except ray.exceptions.RayError as exc:
            raise RuntimeError(
                f"a pool worker could not start: {type(exc).__name__}: {exc}"
            ) from exc

    def release(self, slots: list[int], grace: float) -> None:
        """Have the actors in ``slots`` close their run's env and model; one that does not
        answer within ``grace`` seconds is killed (a pool replaces it at its next run)."""
        ray = self.ray
        for ref, s in list(self.refs.items()):
            if s in slots:
                del self.refs[ref]
        calls = {self.actors[s].release.remote(): s for s in slots if self.has_worker(s)}
        waiting = set(calls.values())
        try:
            if calls:
                ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=grace)
                for ref in ready:
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        self._lost(calls[ref], exc)
                    waiting.discard(calls[ref])
        finally:
            for slot in waiting:
                self._mark_dead(slot)

    def _mark_dead(self, slot: int, *, killed: bool = False) -> None:
        self.dead.add(slot)
        actor = self.actors.get(slot)
        if actor is not None and not killed:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:
                pass
        for ref, s in list(self.refs.items()):
            if s == slot:
                del self.refs[ref]

    def kill(self, slot: int) -> None:
        self._mark_dead(slot)

    def stop(self, slot: int) -> list[Event]:
        """Kill ``slot``'s actor now, then read what it returned before it died (its finished
        episodes), as for an actor lost on its own."""
        actor = self.actors.get(slot)
        if actor is None or slot in self.dead:
            return []
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:
            pass
        events = self._salvage(slot)
        self._mark_dead(slot, killed=True)
        return events

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
