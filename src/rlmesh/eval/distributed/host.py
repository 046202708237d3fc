"""Inside a worker (either backend): build the run's env and model, run the episodes handed over.

A worker unpickles the job (:mod:`.job`), builds its own env and model from the recipes
(:class:`WorkerCore`), opens one session and runs the episodes it is handed one at a
time, each exactly as the single-process loop runs episode ``i``: ``reset(seed=seeds[i])``
with trial index ``trial_index_base + i``. :class:`WorkerHost` keeps a worker's current
run across the runs of a warm pool.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import sys
from collections.abc import Callable
from typing import Any

from ..._autoreset import Autoreset
from ..._spawn.pickling import loads, portable_error
from .._targets import LocalContract
from .job import Endpoint, Job, Outcome

__all__ = ["WorkerCore", "WorkerHost", "worker_info"]


def worker_info() -> dict[str, Any]:
    """Where this worker runs: host name, pid and Ray node id (``""`` outside Ray)."""
    node = ""
    try:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            node = str(ray.get_runtime_context().get_node_id())
    except Exception:
        node = ""
    return {"host": socket.gethostname(), "pid": os.getpid(), "node": node}


class WorkerCore:
    """One worker's state for one run: its session, its hooks and its journal."""

    def __init__(self, job_bytes: bytes, slot: int, label: str, journal: Any = None) -> None:
        self.job: Job = loads(job_bytes)
        self.slot = slot
        self.label = label
        self.journal = journal
        self.session: Any = None
        self.owned: list[Any] = []  # what the current group's env build made (closed on a switch)
        self.model: Any = None
        self.model_owned: Any = None
        self.model_index = -1
        self.group = -1
        self.hooks_side: Any = None
        self.where = f"worker {label} (pid {os.getpid()})"

    def setup(self) -> dict[str, Any]:
        """Build the env and the model, open the session (connects now: errors surface here)."""
        job = self.job
        self._open(job.first_group(self.slot))
        if job.hooks_plan is not None:
            self.hooks_side = job.hooks_plan.open(self)
        info = worker_info()
        info["contract"] = _portable_contract(self.session.contract)
        return info

    def run(self, index: int, seed: int | None, trial: int) -> Outcome:
        """Run episode ``index`` exactly as the single loop does; raises what the episode raised."""
        group = self.job.group_for(index)
        if group != self.group:  # a grouped run handed over another group's episode
            self._close_session()
            self._open(group)
        side = self.hooks_side
        hooks = side.hooks_for(index, seed) if side is not None else None
        res = self.session.run(
            seeds=None if seed is None else [seed],
            max_episodes=1,
            hooks=hooks,
            trial_index_base=trial,
            progress=False,  # the driver draws the run's line; a worker may share its terminal
            **self.job.caps,
        )
        episode = dataclasses.replace(res.episodes[0], index=index)
        payload = side.collect(index, episode) if side is not None else None
        journaled = False
        if self.journal is not None:
            self.journal.record(episode, self.label)
            journaled = True
        return Outcome(episode, tuple(res.telemetry), payload, journaled)

    def _open(self, group: int) -> None:
        """Build ``group``'s env (and its model, unless the current one is the same) and open
        the session on them."""
        job = self.job
        env = job.env_for(self.slot, group)
        if isinstance(env, (str, Endpoint)):
            target: Any = env  # an address (with its token): the session dials it
        else:
            built = env.build()
            self.owned.append(built)
            target = built.env
        index = job.model_index(group)
        if index != self.model_index:
            self._close_model()
            self.model, self.model_owned = job.model_for(group).build()
            self.model_index = index
        self.group = group
        self.session = job.open_session(self.model, target, job.session)
        lanes = self.session.num_envs  # connects
        if lanes != 1:
            raise ValueError(
                f"workers= drives one env per worker, but this env has num_envs={lanes}; "
                "serve or build single envs (one lane each), or run the vector env with workers=None"
            )

    def _close_session(self) -> None:
        """Close the session and the env it ran on (a switch to another group); keep the model."""
        session, self.session = self.session, None
        owned, self.owned = self.owned, []
        self.group = -1
        for thing in (session, *reversed(owned)):
            if thing is not None:
                thing.close()

    def _close_model(self) -> None:
        model, self.model_owned, self.model = self.model_owned, None, None
        self.model_index = -1
        if model is not None:
            model.close()

    def close(self, *, keep_journal: bool = False) -> None:
        """Close the session, the hooks and what setup built (and the journal unless ``keep_journal``)."""
        errors: list[BaseException] = []
        for thing in (self.hooks_side, self.session, *reversed(self.owned), self.model_owned):
            if thing is None:
                continue
            try:
                thing.close()
            except BaseException as exc:
                errors.append(exc)
        self.session = self.hooks_side = self.model = self.model_owned = None
        self.owned = []
        self.group = self.model_index = -1
        if self.journal is not None and not keep_journal:
            self.journal.close()
            self.journal = None
        if errors:
            raise errors[0]


class WorkerHost:
    """One worker process across runs (both backends): the current run's :class:`WorkerCore`, or none.

    ``setup`` drops the previous run's env and model and builds the new run's; ``run``
    runs one episode (rebuilding first after an episode that raised: the env may be
    unusable); ``release`` drops the env, the model and the journal, so a worker of a
    warm pool holds nothing between runs.
    """

    def __init__(self) -> None:
        self.core: WorkerCore | None = None
        self.broken = False

    @property
    def episode_timeout_seconds(self) -> float | None:
        """The current run's per-episode deadline (``None``: none, or no run)."""
        core = self.core
        return None if core is None else core.job.episode_timeout_seconds

    def setup(
        self, job_bytes: bytes, slot: int, label: str, open_journal: Callable[[], Any] | None
    ) -> tuple[Any, ...]:
        """``("ready", info)`` or ``("setup_failed", error)`` (the worker stays usable either way)."""
        self.release()
        journal = None
        try:
            journal = open_journal() if open_journal is not None else None
            self.core = WorkerCore(job_bytes, slot, label, journal)
        except Exception as exc:
            if journal is not None:
                try:
                    journal.close()
                except Exception:
                    pass
            return ("setup_failed", portable_error(exc, f"worker {label} setting up"))
        try:
            return ("ready", self.core.setup())
        except Exception as exc:
            self.release()
            return ("setup_failed", portable_error(exc, f"worker {label} setting up"))

    def run(self, index: int, seed: int | None, trial: int) -> tuple[Any, ...]:
        """``("done", outcome)`` or ``("failed", index, error)``; a failed rebuild raises (the worker is lost)."""
        core = self.core
        if core is None:
            return (
                "failed",
                index,
                RuntimeError(f"worker (pid {os.getpid()}) was handed episode {index} before a job"),
            )
        if self.broken:  # the env may be unusable after an error: rebuild it, as a new run would
            core.close(keep_journal=True)
            core.setup()
            self.broken = False
        try:
            return ("done", core.run(index, seed, trial))
        except Exception as exc:
            self.broken = True
            return ("failed", index, portable_error(exc, core.where))

    def release(self) -> tuple[Any, ...]:
        """Drop the current run's env, model, hooks and journal (errors closing them are swallowed)."""
        core, self.core = self.core, None
        self.broken = False
        if core is not None:
            try:
                core.close()
            except Exception:
                pass
        return ("released",)


def _portable_contract(contract: Any) -> Any:
    """The env contract for the driver's ``RunContext``: as is, or copied into plain fields."""
    try:
        pickle.dumps(contract)
        return contract
    except Exception:
        pass
    try:
        metadata = getattr(contract, "metadata", None)
        copy = LocalContract(
            str(getattr(contract, "id", "")),
            contract.observation_space,
            contract.action_space,
            render_mode=getattr(contract, "render_mode", None),
            num_envs=int(getattr(contract, "num_envs", 1)),
            metadata=dict(metadata) if metadata is not None else None,
            autoreset_mode=str(getattr(contract, "autoreset_mode", Autoreset.DISABLED.value)),
        )
        pickle.dumps(copy)
        return copy
    except Exception:
        return None
