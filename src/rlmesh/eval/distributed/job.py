"""What a distributed run ships to its workers: the job and its recipes.

The driver turns the run's model and env into recipes (:class:`Job`), pickles the job
once with ``cloudpickle`` (:func:`rlmesh._spawn.pickling.dumps`: what a script defines
travels by value, so a script needs no ``__main__`` guard) and sends the bytes to every
worker, which builds its own env and model from them (:mod:`.host`).

Env recipes (one per worker *slot*, so a replacement worker gets the same one): a served
address (``str``: the session dials it) or an :class:`~rlmesh._spawn.EnvRecipe` (the worker
builds the env and drives it in-process):

- a list of addresses (strings or objects with an ``address``): slot ``k`` drives ``[k]``;
- an address string or a served handle: every worker dials it (a multi-session endpoint);
- any other string: a Gymnasium id, ``gymnasium.make(id)`` in each worker;
- an env factory -- an ``EnvFactory`` (class or instance) or anything with ``make()`` --
  an env class or a zero-argument callable: built per worker;
- a live Gymnasium env with a ``spec``: re-made from the spec; another live env: a
  pickled copy per worker.

Model recipes: :data:`~rlmesh.RANDOM_SAMPLE`; a ``Model`` subclass (instantiated per
worker); a zero-argument callable (a factory such as
``functools.partial(MyModel.from_config, ckpt=...)``, called once per worker); a served
model (each worker opens its own session); anything else (a ``Model`` instance, a predict
callable, a policy) is pickled and each worker gets its own copy.
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..._spawn.pickling import dumps, short_repr
from ..._spawn.recipe import EnvRecipe
from ...client._model import RemoteModel
from ...models._base import ModelBase
from ...models._sentinels import RANDOM_SAMPLE
from .._options import SessionOptions
from .._results import EpisodeResult
from .._targets import classify_string, classify_target

__all__ = [
    "Endpoint",
    "Group",
    "Job",
    "ModelRecipe",
    "Outcome",
    "describe_target",
    "env_recipes",
    "model_recipe",
    "ship",
]

#: The schemes of sandbox sources (``rlmesh.SandboxEnv``), which a worker cannot dial.
_SANDBOX_SCHEMES = ("gym", "hf", "docker", "image")
#: The sandboxed env clients of every flavour (duck-typed: sandbox/ sits above eval/).
_SANDBOX_CLASSES = ("SandboxEnv", "SandboxVectorEnv", "ScalarSandbox", "VectorSandbox")


@dataclass(frozen=True)
class Endpoint:
    """A served env a worker dials with its token (an ``EnvServer``'s, a fleet's ...).

    The session dials it as it dials any object with an ``address`` (and a ``token``).
    """

    address: str
    token: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint({self.address!r})"  # never the token


#: A slot's env: an address to dial (with its token, when it has one), or a recipe to build.
SlotEnv = EnvRecipe | Endpoint | str


def ship(obj: Any, what: str) -> bytes:
    """Pickle ``obj`` for the workers; a failure is one line naming it and what to pass instead.

    Raises:
        TypeError: ``obj`` cannot be pickled.
    """
    return dumps(
        obj,
        what,
        who="workers=",
        remedy=f"Pass a picklable {what}, or a class / zero-argument factory that builds it inside "
        "each worker (e.g. functools.partial(MyModel.from_config, ckpt=...)), or run with workers=None",
    )


def _shipped(obj: Any, what: str) -> Any:
    ship(obj, what)  # the clear error now, on the driver
    return obj


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


def _address_of(obj: Any) -> str | Endpoint | None:
    """An address string, or an :class:`Endpoint` when the object carries its token."""
    if isinstance(obj, str):
        return obj
    address = getattr(obj, "address", None)
    if not isinstance(address, str):
        return None
    token = getattr(obj, "token", None)
    return Endpoint(address, token) if isinstance(token, str) and token else address


def _fleet_endpoints(env: Any) -> list[Endpoint] | None:
    """An env fleet (``rlmesh.ray.EnvFleet``: ``addresses`` and a ``token``): one endpoint per
    actor, each dialed with the fleet's token (duck-typed: ray/ sits above eval/)."""
    if isinstance(env, (str, list, tuple)) or not callable(getattr(env, "vector_env", None)):
        return None
    token = getattr(env, "token", None)
    addresses = getattr(env, "addresses", None)
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        return None
    return [Endpoint(a, token if isinstance(token, str) else None) for a in addresses]


def _recipe(source: Any, what: str) -> EnvRecipe:
    return EnvRecipe(_shipped(source, what))


def env_recipes(env: Any, n: int | None) -> tuple[list[SlotEnv], int | None]:
    """The per-slot envs for ``env`` and the worker count it implies (``None``: no limit).

    Raises:
        ValueError: more workers than addresses; an unknown Gymnasium id; a live sandbox.
        TypeError: a form no worker can rebuild (e.g. an unpicklable live env).
    """
    fleet = _fleet_endpoints(env)
    if fleet is not None:  # one actor per worker, dialed with the fleet's token
        env = fleet
    if isinstance(env, (list, tuple)):
        if not env:
            raise ValueError("env is an empty list: pass one served address per worker")
        addresses: list[SlotEnv] = []
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
        return list(addresses), len(addresses)
    if isinstance(env, str):
        return [_string_env(env)], None
    if any(k.__name__ in _SANDBOX_CLASSES for k in type(env).__mro__):
        source = getattr(env, "source", "SOURCE")
        raise ValueError(
            f"{type(env).__name__} is one running sandbox; with workers= pass "
            f"functools.partial(rlmesh.SandboxEnv, {source!r}, ...) so each worker starts its own"
        )
    if isinstance(env, type):
        if callable(getattr(env, "make", None)):
            return [_recipe(env, "env factory")], None
        if callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None)):
            return [_recipe(env, "env class")], None
    try:
        kind = classify_target(env)
    except TypeError:
        if _zero_arg_callable(env):
            return [_recipe(env, "env callable")], None
        raise
    if kind in ("address", "server", "remote"):
        address = _address_of(env)
        if address is None:
            raise TypeError(
                f"{type(env).__name__} is a live remote env without an address; pass its address instead"
            )
        return [address], None
    if kind == "factory":
        return [_recipe(env, "env factory")], None
    # a live local env: re-make a Gymnasium env from its spec, else ship a copy
    spec = getattr(env, "spec", None)
    if spec is not None and type(spec).__name__ == "EnvSpec" and getattr(spec, "id", None):
        return [_recipe(spec, "env spec")], None
    return [EnvRecipe(_CopyOf(ship(env, "env")), tags=None)], None


def _string_env(env: str) -> SlotEnv:
    """An address (every worker dials it) or a Gymnasium id (each makes its own): the rule of
    ``rlmesh.run`` without workers (:func:`~rlmesh.eval._targets.classify_string`)."""
    if env.partition("://")[0].lower() in _SANDBOX_SCHEMES:
        raise ValueError(
            f"env={env!r} looks like a sandbox source; with workers= pass "
            f"functools.partial(rlmesh.SandboxEnv, {env!r}, ...) so each worker starts its own sandbox"
        )
    return env if classify_string(env) == "address" else EnvRecipe(env)


class _CopyOf:
    """A pickled copy of a live env, as a make callable: each build unpickles a fresh one."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def __call__(self) -> Any:
        return pickle.loads(self.payload)


def slot_label(env: SlotEnv) -> str:
    """What a slot's env is, for the journal's run identity."""
    if isinstance(env, str):
        return env
    if isinstance(env, Endpoint):
        return env.address
    source = env.source
    if isinstance(source, _CopyOf):
        return "copy"
    if type(source).__name__ == "EnvSpec":
        return str(source.id)
    return env.label


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
            remote = RemoteModel(model.address, token=getattr(model, "token", None))
            return ModelRecipe("as_is", remote, f"SandboxModel({model.address})")
        return ModelRecipe("as_is", _shipped(model, "model"), repr(model))
    if isinstance(model, type):
        return ModelRecipe("as_is", _shipped(model, "model class"), model.__qualname__)
    if (
        not isinstance(model, ModelBase)
        and _zero_arg_callable(model)
        and not callable(getattr(model, "predict", None))
        and not callable(getattr(model, "session", None))
    ):
        return ModelRecipe("factory", _shipped(model, "model factory"), short_repr(model))
    return ModelRecipe("as_is", _shipped(model, "model"), short_repr(model))


# -- the job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One group of a grouped run (a suite's task): its per-slot envs and its model's index
    in :attr:`Job.models` (groups sharing a model share its index: a worker switching groups
    keeps the model and rebuilds only the env)."""

    envs: tuple[SlotEnv, ...]
    model: int


@dataclass(frozen=True)
class Job:
    """Everything a worker needs; pickled once per run.

    A plain run has one env (per slot) and one model. A *grouped* run
    (:func:`.run.run_grouped`) has several :attr:`groups`, each episode belonging to one
    (:attr:`group_of`); a worker holds one group's env at a time and the driver hands it
    episodes of that group while there are any (task affinity), so each env is built by as
    few workers as the schedule allows.
    """

    envs: tuple[SlotEnv, ...]
    model: ModelRecipe
    #: ``rlmesh.eval._api.open_session``, shipped by reference.
    open_session: Callable[..., Any]
    session: SessionOptions
    #: ``Session.run`` caps: ``max_episode_steps``, ``max_episode_seconds``.
    caps: dict[str, Any]
    hooks_plan: Any = None  # a worker-hooks plan (see .hooks), or None
    #: The run's per-episode deadline: a worker whose driver is gone gives up on its episode then.
    episode_timeout_seconds: float | None = None

    #: A grouped run: the groups, the models they use, and each episode's group (by index).
    groups: tuple[Group, ...] = ()
    models: tuple[ModelRecipe, ...] = ()
    group_of: tuple[int, ...] = ()

    def env_for(self, slot: int, group: int = 0) -> SlotEnv:
        envs = self.groups[group].envs if self.groups else self.envs
        return envs[slot % len(envs)]

    def model_index(self, group: int) -> int:
        """The index of ``group``'s model in :attr:`models` (0 in a plain run)."""
        return self.groups[group].model if self.groups else 0

    def model_for(self, group: int) -> ModelRecipe:
        return self.models[self.groups[group].model] if self.groups else self.model

    def group_for(self, index: int) -> int:
        """The group of episode ``index`` (0 in a plain run)."""
        return self.group_of[index] if self.group_of else 0

    def first_group(self, slot: int) -> int:
        """The group a worker in ``slot`` builds at setup (and the driver hands it first)."""
        return slot % len(self.groups) if self.groups else 0


@dataclass(frozen=True)
class Outcome:
    """One finished episode, as a worker reports it."""

    result: EpisodeResult
    telemetry: tuple[Any, ...]
    payload: Any = None  # the worker-side hooks' product (e.g. recorded media)
    journaled: bool = False


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
