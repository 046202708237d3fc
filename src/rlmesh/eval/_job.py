"""What a distributed run ships to its workers, and what each worker does with it.

The driver turns the run's model and env into *recipes* (:class:`Job`), pickles the job
once (``cloudpickle`` when it is installed, it comes with Ray; the standard ``pickle``
otherwise) and sends the bytes to every worker. A worker unpickles the job, builds its
own env and model from the recipes (:class:`WorkerCore`), opens one session and runs
the episodes it is handed one at a time, each exactly as the single-process loop runs
episode ``i``: ``reset(seed=seeds[i])`` with trial index ``trial_index_base + i``.

Env recipes (one per worker *slot*, so a replacement worker gets the same one):

- a list of addresses (strings or objects with an ``address``): slot ``k`` drives ``[k]``;
- an address string or a served handle: every worker dials it (a multi-session endpoint);
- any other string: a Gymnasium id, ``gymnasium.make(id)`` in each worker;
- an ``EnvFactory`` (class or instance) or a duck factory (``make()``): shipped, built per worker;
- a class with ``reset``/``step``: instantiated per worker; a zero-argument callable: called;
- a live Gymnasium env with a ``spec``: re-made from the spec; another live env: a pickled copy.

Model recipes: :data:`~rlmesh.RANDOM_SAMPLE`; a ``Model`` subclass (instantiated per
worker); a zero-argument callable (a factory such as
``functools.partial(MyModel.from_config, ckpt=...)``, called once per worker); a served
model (each worker opens its own session); anything else (a ``Model`` instance, a predict
callable, a policy) is pickled and each worker gets its own copy.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pickle
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._autoreset import Autoreset
from .._gymid import make_gym_env
from ..client._model import RemoteModel
from ..models._base import ModelBase
from ..models._sentinels import RANDOM_SAMPLE
from ._results import EpisodeResult
from ._targets import LocalContract, classify_target

__all__ = [
    "EnvRecipe",
    "Job",
    "ModelRecipe",
    "WorkerCore",
    "WorkerHost",
    "dumps",
    "env_recipe",
    "model_recipe",
]

_ADDRESS = re.compile(r"^(tcp://|unix://|[\w.\-]+:\d+$|\d+$|\[[0-9a-fA-F:]+\]:\d+$)")


def _pickler() -> tuple[Callable[[Any], bytes], str]:
    try:
        import cloudpickle
    except ImportError:
        return (lambda obj: pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), "pickle"
    return (lambda obj: cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), "cloudpickle"


def dumps(obj: Any, what: str) -> bytes:
    """Pickle ``obj`` for the workers; a failure names the object and what to pass instead.

    Raises:
        TypeError: ``obj`` cannot be pickled.
    """
    dump, how = _pickler()
    try:
        return dump(obj)
    except Exception as exc:
        hint = (
            ""
            if how == "cloudpickle"
            else " (lambdas and closures need cloudpickle: pip install cloudpickle; Ray brings it)"
        )
        raise TypeError(
            f"workers= ships the {what} to every worker with {how}, but {_short_repr(obj)} "
            f"({type(obj).__module__}.{type(obj).__qualname__}) cannot be pickled: {type(exc).__name__}: {exc}{hint}. "
            f"Pass a picklable {what}, or a class / zero-argument factory that builds it inside each worker "
            "(e.g. functools.partial(MyModel.from_config, ckpt=...)), or run with workers=None"
        ) from exc


def _short_repr(obj: Any) -> str:
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


def _zero_arg_callable(obj: Any) -> bool:
    """A callable that can be called with no argument and takes no ``*args`` (a factory, not a predict fn)."""
    if isinstance(obj, type) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return False
        if p.default is p.empty and p.kind in (
            p.POSITIONAL_ONLY,
            p.POSITIONAL_OR_KEYWORD,
            p.KEYWORD_ONLY,
        ):
            return False
    return True


# -- env recipes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvRecipe:
    """How a worker slot gets its env: ``kind`` and the shipped ``value``.

    ``kind`` is ``"target"`` (hand ``value`` to the session as is: an address, a factory,
    a live env copy), ``"gym"`` (``gymnasium.make(value)``), ``"class"`` (``value()``) or
    ``"call"`` (``value()``, the worker closes the env it returns).
    """

    kind: str
    value: Any
    label: str

    def build(self) -> tuple[Any, Any]:
        """``(target for the session, env to close at the end or None)``."""
        if self.kind == "gym":
            env = make_gym_env(self.value)
            return env, env
        if self.kind in ("class", "call"):
            env = self.value()
            return env, env
        return self.value, None


def _address_of(obj: Any) -> str | None:
    if isinstance(obj, str):
        return obj
    address = getattr(obj, "address", None)
    return address if isinstance(address, str) else None


def env_recipe(env: Any, n: int | None) -> tuple[list[EnvRecipe], int | None]:
    """The per-slot env recipes for ``env`` and the worker count it implies (``None``: no limit).

    Raises:
        ValueError: more workers than addresses; an unknown Gymnasium id; a live sandbox.
        TypeError: a form no worker can rebuild (e.g. an unpicklable live env).
    """
    if isinstance(env, (list, tuple)):
        if not env:
            raise ValueError("env is an empty list: pass one served address per worker")
        addresses = []
        for item in env:
            address = _address_of(item)
            if address is None:
                raise TypeError(
                    f"a list env must hold served addresses (strings or objects with an address), got {type(item).__name__}"
                )
            addresses.append(address)
        if n is not None and n > len(addresses):
            raise ValueError(
                f"workers={n} but the env list has {len(addresses)} address(es): each worker drives one "
                f"address; pass workers<={len(addresses)} or serve {n - len(addresses)} more env(s)"
            )
        return [EnvRecipe("target", a, a) for a in addresses], len(addresses)
    if isinstance(env, str):
        if _ADDRESS.match(env):
            return [EnvRecipe("target", env, env)], None
        if "://" in env:
            raise ValueError(
                f"env={env!r} looks like a sandbox source; with workers= pass "
                f"functools.partial(rlmesh.SandboxEnv, {env!r}, ...) so each worker starts its own sandbox"
            )
        try:
            import gymnasium
        except ImportError:
            raise ValueError(
                f"env={env!r} is neither an address (host:port, unix:///path) nor usable as a Gymnasium id "
                '(gymnasium is not installed: pip install gymnasium, the "gymnasium" extra of rlmesh-py)'
            ) from None
        try:
            gymnasium.spec(env)
        except Exception as exc:
            raise ValueError(
                f"env={env!r} is neither an address (host:port, tcp://..., unix:///path) nor a registered "
                f"Gymnasium id ({type(exc).__name__}: {exc})"
            ) from None
        return [EnvRecipe("gym", env, env)], None
    if getattr(env, "_sandbox_info", None) is not None or type(env).__name__ in (
        "SandboxEnv",
        "SandboxVectorEnv",
    ):
        source = getattr(env, "source", "SOURCE")
        raise ValueError(
            f"{type(env).__name__} is one running sandbox; with workers= pass "
            f"functools.partial(rlmesh.SandboxEnv, {source!r}, ...) so each worker starts its own"
        )
    if isinstance(env, type):
        has_reset_step = callable(getattr(env, "reset", None)) and callable(
            getattr(env, "step", None)
        )
        if callable(getattr(env, "make", None)):
            return [EnvRecipe("target", _shipped(env, "env factory"), env.__qualname__)], None
        if has_reset_step:
            return [EnvRecipe("class", _shipped(env, "env class"), env.__qualname__)], None
    try:
        kind = classify_target(env)
    except TypeError:
        if _zero_arg_callable(env):
            return [EnvRecipe("call", _shipped(env, "env callable"), _short_repr(env))], None
        raise
    if kind in ("address", "server"):
        address = _address_of(env) or ""
        return [EnvRecipe("target", address, address)], None
    if kind == "remote":
        address = _address_of(env)
        if address is None:
            raise TypeError(
                f"{type(env).__name__} is a live remote env without an address; pass its address instead"
            )
        return [EnvRecipe("target", address, address)], None
    if kind == "factory":
        return [EnvRecipe("target", _shipped(env, "env factory"), type(env).__qualname__)], None
    # a live local env: re-make a Gymnasium env from its spec, else ship a copy
    spec = getattr(env, "spec", None)
    if spec is not None and type(spec).__name__ == "EnvSpec" and getattr(spec, "id", None):
        return [EnvRecipe("gym", _shipped(spec, "env spec"), str(spec.id))], None
    return [EnvRecipe("call", _CopyOf(_shipped(env, "env")), type(env).__qualname__)], None


class _CopyOf:
    """A pickled copy of a live env: each worker unpickles its own."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def __call__(self) -> Any:
        return pickle.loads(self.payload)


def _shipped(obj: Any, what: str) -> Any:
    dumps(obj, what)  # the clear error now, on the driver
    return obj


# -- model recipes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRecipe:
    """How a worker gets its model: ``kind`` is ``"random"``, ``"as_is"`` or ``"factory"``."""

    kind: str
    value: Any
    label: str

    def build(self) -> tuple[Any, Any]:
        """``(model for the session, model to close at the end or None)``."""
        if self.kind == "random":
            return RANDOM_SAMPLE, None
        if self.kind == "factory":
            model = self.value()
            return model, model
        return self.value, None


def model_recipe(model: Any) -> ModelRecipe:
    """The model recipe (see the module docstring).

    Raises:
        TypeError: the model cannot be pickled (the message names it).
    """
    if model is RANDOM_SAMPLE:
        return ModelRecipe("random", None, "RANDOM_SAMPLE")
    if type(model).__name__ == "SandboxModel" and hasattr(model, "serving"):
        if model.serving:  # a running container: every worker opens its own session on it
            return ModelRecipe(
                "as_is", RemoteModel(model.address), f"SandboxModel({model.address})"
            )
        return ModelRecipe("as_is", _shipped(model, "model"), repr(model))
    if isinstance(model, type):
        return ModelRecipe("as_is", _shipped(model, "model class"), model.__qualname__)
    if (
        not isinstance(model, ModelBase)
        and _zero_arg_callable(model)
        and not callable(getattr(model, "predict", None))
        and not callable(getattr(model, "session", None))
    ):
        return ModelRecipe("factory", _shipped(model, "model factory"), _short_repr(model))
    return ModelRecipe("as_is", _shipped(model, "model"), _short_repr(model))


# -- the job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """Everything a worker needs; pickled once per run."""

    envs: tuple[EnvRecipe, ...]
    model: ModelRecipe
    open_session: Callable[..., Any]  # rlmesh.eval._api._dispatch, shipped by reference
    session_kw: Mapping[str, Any]
    run_kw: Mapping[str, Any]
    hooks_plan: Any = None  # a worker-hooks plan (see _dhooks), or None

    def env_for(self, slot: int) -> EnvRecipe:
        return self.envs[slot % len(self.envs)]


@dataclass(frozen=True)
class Outcome:
    """One finished episode, as a worker reports it."""

    result: EpisodeResult
    telemetry: tuple[Any, ...]
    payload: Any = None  # the worker-side hooks' product (e.g. recorded media)
    journaled: bool = False


def portable_error(exc: BaseException, where: str) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a ``RuntimeError`` with its type and text."""
    try:
        note = f"raised in {where}"
        clone = pickle.loads(pickle.dumps(exc))
        if type(clone) is type(exc) and str(clone) == str(exc):
            if hasattr(clone, "add_note"):
                clone.add_note(note)
            return clone
    except Exception:
        pass
    return RuntimeError(
        f"{type(exc).__module__}.{type(exc).__qualname__}: {exc} (raised in {where}; not picklable)"
    )


class WorkerCore:
    """One worker's state: its session, its hooks and its journal (backend independent)."""

    def __init__(self, job_bytes: bytes, slot: int, label: str, journal: Any = None) -> None:
        self.job: Job = pickle.loads(job_bytes)
        self.slot = slot
        self.label = label
        self.journal = journal
        self.session: Any = None
        self.owned: list[Any] = []
        self.hooks_side: Any = None
        self.where = f"worker {label} (pid {os.getpid()})"

    def info(self) -> dict[str, Any]:
        return worker_info()

    def setup(self) -> dict[str, Any]:
        """Build the env and the model, open the session (connects now: errors surface here)."""
        job = self.job
        target, env_owned = job.env_for(self.slot).build()
        if env_owned is not None:
            self.owned.append(env_owned)
        model, model_owned = job.model.build()
        if model_owned is not None:
            self.owned.append(model_owned)
        self.session = job.open_session(model, target, **job.session_kw)
        lanes = self.session.num_envs  # connects
        if lanes != 1:
            raise ValueError(
                f"workers= drives one env per worker, but this env has num_envs={lanes}; "
                "serve or build single envs (one lane each), or run the vector env with workers=None"
            )
        if job.hooks_plan is not None:
            self.hooks_side = job.hooks_plan.open(self)
        info = self.info()
        info["contract"] = _portable_contract(self.session.contract)
        return info

    def run(self, index: int, seed: int | None, trial: int) -> Outcome:
        """Run episode ``index`` exactly as the single loop does; raises what the episode raised."""
        side = self.hooks_side
        hooks = side.hooks_for(index, seed) if side is not None else None
        res = self.session.run(
            seeds=None if seed is None else [seed],
            max_episodes=1,
            hooks=hooks,
            trial_index_base=trial,
            **self.job.run_kw,
        )
        episode = dataclasses.replace(res.episodes[0], index=index)
        payload = side.collect(index, episode) if side is not None else None
        journaled = False
        if self.journal is not None:
            self.journal.record(episode, self.label)
            journaled = True
        return Outcome(episode, tuple(res.telemetry), payload, journaled)

    def close(self, *, keep_journal: bool = False) -> None:
        """Close the session, the hooks and what setup built (and the journal unless ``keep_journal``)."""
        errors: list[BaseException] = []
        for thing in (self.hooks_side, self.session, *reversed(self.owned)):
            if thing is None:
                continue
            try:
                thing.close()
            except BaseException as exc:
                errors.append(exc)
        self.session = self.hooks_side = None
        self.owned = []
        if self.journal is not None and not keep_journal:
            self.journal.close()
            self.journal = None
        if errors:
            raise errors[0]


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


class WorkerHost:
    """One worker process across runs (both backends): the current run's :class:`WorkerCore`, or none.

    ``setup`` drops the previous run's env and model and builds the new run's; ``run``
    runs one episode (rebuilding first after an episode that raised: the env may be
    unusable); ``release`` drops the env, the model and the journal, so a worker of a
    :class:`~rlmesh.eval.WorkerPool` holds nothing between runs.
    """

    def __init__(self) -> None:
        self.core: WorkerCore | None = None
        self.broken = False

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


def describe_target(obj: Any) -> str:
    """A short stable description of a model or env (the journal's run identity)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, Sequence):
        return ",".join(describe_target(x) for x in obj)
    func = getattr(obj, "func", None)
    if func is not None and callable(func) and hasattr(obj, "keywords"):  # functools.partial
        return f"partial({describe_target(func)})"
    if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
