"""``EnvFleet``: ``n`` Ray actors, each serving an env endpoint on its node.

Ray is imported and started when a fleet starts (:mod:`rlmesh._spawn.ray`: this package is
named ``rlmesh.ray`` and must never shadow the real one), never at ``import rlmesh``. Each
actor builds its env from one :class:`~rlmesh._spawn.EnvRecipe`, the recipe every worker
of rlmesh builds from.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._argcheck import check_count
from .._spawn.pickling import dumps
from .._spawn.ray import import_ray, init_ray
from .._spawn.recipe import EnvRecipe, is_env_factory
from .._token import new_token
from ..authoring import EnvFactory
from ..errors import ActorLost, ConnectionLost, FleetStartError, FleetStartTimeout, RequestTimeout
from ..serve import ServeOptions
from ._actor import ActorInfo, EnvActor, SandboxedEnv
from ._vector import open_fleet_vector_env

__all__ = ["EnvFleet"]

_FLAVOURS = ("gymnasium", "numpy", "torch", "jax")
_CLOSE_SECONDS = (
    10.0  # per actor: the server drains and closes its env within ServeOptions' 5 + 5 s
)


def _ray() -> Any:
    return import_ray("EnvFleet")


def _check_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return float(value)


def spread_over_nodes(
    ray: Any, n: int, ray_options: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """``n`` actors round robin over the alive nodes that can host one (``SPREAD``).

    Ray's own ``"SPREAD"`` is best effort: actors created together may all land on one node
    (seen on a 3-node cluster). Each actor here gets a *soft* affinity to its node instead,
    nodes taken in turn: an actor whose node is lost (or cannot place it) is placed elsewhere,
    and a restart goes where Ray can. ``None`` (Ray's ``SPREAD``) when fewer than two nodes fit.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    need = {
        "CPU": float(ray_options.get("num_cpus", 1.0)),  # an actor's default placement CPU
        "GPU": float(ray_options.get("num_gpus", 0.0)),
        **{k: float(v) for k, v in dict(ray_options.get("resources") or {}).items()},
    }
    nodes = sorted(
        node["NodeID"]
        for node in ray.nodes()
        if node.get("Alive")
        and all(node.get("Resources", {}).get(k, 0.0) >= v for k, v in need.items() if v > 0)
    )
    if len(nodes) < 2:
        return None

    def on(node: str) -> Any:
        try:  # a busy node passes the actor on rather than keeping it waiting
            return NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
        except TypeError:  # a Ray without that (private) option
            return NodeAffinitySchedulingStrategy(node, soft=True)

    return [{"scheduling_strategy": on(nodes[i % len(nodes)])} for i in range(n)]


def _resource_options(resources: Mapping[str, float] | None) -> dict[str, Any]:
    """``{"CPU": 1, "GPU": 0.5, "memory": 2**30, "sim_license": 1}`` -> Ray actor options."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"resources must be a mapping of resource name to amount, got {type(resources).__name__}"
        )
    out: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"resource names must be non-empty strings, got {name!r}")
        if (
            isinstance(amount, bool)
            or not isinstance(amount, (int, float))
            or not math.isfinite(amount)
            or amount < 0
        ):
            raise ValueError(f"resource {name!r} must be a finite amount >= 0, got {amount!r}")
        if name == "CPU":
            out["num_cpus"] = amount
        elif name == "GPU":
            out["num_gpus"] = amount
        elif name == "memory":
            out["memory"] = amount
        else:
            custom[name] = float(amount)
    if custom:
        out["resources"] = custom
    return out


def _sandbox_options(sandbox: Any, env: Any) -> dict[str, Any] | None:
    if sandbox is None:
        return None
    if not isinstance(env, str):
        raise TypeError(
            f"sandbox= needs the env as a sandbox source string (e.g. 'gym://CartPole-v1'), got {type(env).__name__}"
        )
    if isinstance(sandbox, str):
        return {"backend": sandbox}
    if isinstance(sandbox, Mapping):
        allowed = {"backend", "build", "runtime", "connect_timeout_seconds"}
        bad = sorted(set(sandbox) - allowed)
        if bad:
            raise TypeError(f"sandbox= takes the keys {sorted(allowed)}, got {bad}")
        return dict(sandbox)
    raise TypeError(
        f"sandbox must be None, a backend name ('auto', 'venv', 'docker') or a mapping, got {type(sandbox).__name__}"
    )


def _check_env(env: Any) -> None:
    if isinstance(env, str):
        if not env.strip():
            raise ValueError(
                "env must name an env: a Gymnasium id, a 'module:attr' target or a sandbox source"
            )
        return
    if is_env_factory(env) or callable(env) or callable(getattr(env, "make", None)):
        return
    raise TypeError(
        "env must be a Gymnasium id or 'module:attr' string, an env factory (an EnvFactory, or "
        f"anything with make()) or a callable returning an env, got {type(env).__name__}"
    )


class EnvFleet:
    """``n`` Ray actors, each serving ``env`` on a TCP port of its node.

    Each actor builds the env (``lanes`` of them served as one vector endpoint when
    ``lanes > 1``) and serves it on ``<node ip>:<free port>``, the node's IP being the
    one Ray reports (``ray.util.get_node_ip_address()``). :attr:`addresses` lists the
    endpoints in actor order; :meth:`vector_env` drives them all as one vector env.

    Ray restarts a dead actor (``max_restarts`` times): the restarted actor serves on a
    new port, :attr:`addresses` reports it, and :meth:`vector_env`'s env reconnects on
    its next ``reset()``. :meth:`close` (and leaving the ``with`` block) stops every
    actor; the actors are not detached, so they never outlive the driver.

    Every endpoint requires the fleet's token (:attr:`token`: ``options``' token, else
    ``$RLMESH_TOKEN``, else a random one made here), which :meth:`vector_env` sends by
    itself; a client of :attr:`addresses` passes ``token=fleet.token`` (or sets
    ``RLMESH_TOKEN``). See docs/security.md. When Ray is not running yet (and
    ``RAY_ADDRESS`` names no cluster), the fleet starts a local Ray on 127.0.0.1.

    Args:
        env: A Gymnasium id or ``"module:attr"`` target, an env factory (an
            :class:`~rlmesh.EnvFactory`, class or instance, or any class or object with a
            ``make()``), or a callable returning an env (pickled to the actors: one your
            script defines travels by value).
        n: How many actors (endpoints).
        lanes: Envs per actor; ``lanes > 1`` serves them as the lanes of one endpoint
            (like ``rlmesh serve --num-envs``), autoresetting as ``autoreset`` says.
        resources: Ray resources each actor holds, e.g. ``{"CPU": 1}``, ``{"GPU": 0.25}``,
            ``{"sim_license": 1}``. ``None`` (default) holds none while running, so many
            actors share a node's CPUs, as Ray's actors do by default.
        sandbox: Run each actor's env in a sandbox on its node: a backend name
            (``"auto"``, ``"venv"``, ``"docker"``) or a mapping of ``SandboxEnv`` keywords
            (``backend``, ``build``, ``runtime``, ``connect_timeout_seconds``); ``env`` is
            then a sandbox source (``"gym://CartPole-v1"``), relayed on the node's address.
        max_restarts: How often Ray restarts each actor after its process dies
            (``-1``: always, ``0``: never).
        env_kwargs: Keyword arguments for ``gym.make``, the factory's ``make`` binding,
            or the callable.
        autoreset: Lane autoreset mode with ``lanes > 1``: ``"next-step"`` (default, like
            ``gymnasium.make_vec``), ``"same-step"`` or ``"disabled"``.
        options: :class:`~rlmesh.ServeOptions` of every endpoint; its ``token`` (or
            ``$RLMESH_TOKEN``) is the fleet's, else a random one is made.
        scheduling_strategy: Ray's placement: ``"SPREAD"`` (default: the actors go round
            robin over the alive nodes that can host one, each with a soft affinity to its
            node, so an actor whose node is lost restarts elsewhere), ``"DEFAULT"``, or a Ray
            scheduling-strategy object.
        actor_options: More ``ray.remote`` actor options (``runtime_env``, ``label_selector`` ...).
        start_timeout_seconds: How long the actors may take to serve, at start and
            when :attr:`addresses` waits for a restart.

    Raises:
        TypeError, ValueError: bad arguments (checked before any actor starts).
        DependencyMissing: Ray is not installed.
        FleetStartError: an actor could not build or serve its env (all actors are stopped).
        FleetStartTimeout: not every actor was serving within ``start_timeout_seconds``.

    Example::

        with EnvFleet("CartPole-v1", 4) as fleet:
            envs = fleet.vector_env("gymnasium")   # 4 lanes, one per actor
            obs, info = envs.reset(seed=0)
    """

    def __init__(
        self,
        env: str | EnvFactory | type[EnvFactory] | Callable[..., Any] | Any,
        n: int,
        *,
        lanes: int = 1,
        resources: Mapping[str, float] | None = None,
        sandbox: str | Mapping[str, Any] | None = None,
        max_restarts: int = 3,
        env_kwargs: Mapping[str, Any] | None = None,
        autoreset: str | None = None,
        options: ServeOptions | None = None,
        scheduling_strategy: Any = "SPREAD",
        actor_options: Mapping[str, Any] | None = None,
        start_timeout_seconds: float = 120.0,
    ) -> None:
        self._actors: list[Any] = []
        self._serving: set[int] = (
            set()
        )  # actors that have served at least once (close() drains them)
        self._closed = True
        _check_env(env)
        self._n = check_count("n", n, 1)
        self._lanes = check_count("lanes", lanes, 1)
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(
                f"max_restarts must be an int >= -1 (-1: always restart), got {max_restarts!r}"
            )
        if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
            raise TypeError(f"env_kwargs must be a mapping, got {type(env_kwargs).__name__}")
        if autoreset is not None and lanes == 1:
            raise ValueError(
                "autoreset applies to lanes > 1; a single env per actor never autoresets"
            )
        if options is not None and not isinstance(options, ServeOptions):
            raise TypeError(f"options must be a ServeOptions, got {type(options).__name__}")
        options = options if options is not None else ServeOptions()
        if options.token is None:  # every endpoint of the fleet requires this one
            options = options.replace(token=new_token())
        self._token: str = options.token  # type: ignore[assignment]
        self._timeout = _check_seconds("start_timeout_seconds", start_timeout_seconds)
        ray_options: dict[str, Any] = {
            "max_restarts": max_restarts,
            "max_task_retries": -1
            if max_restarts != 0
            else 0,  # info()/close() ride through a restart
            "scheduling_strategy": scheduling_strategy,
            **_resource_options(resources),
        }
        if actor_options:
            if "lifetime" in actor_options:
                raise ValueError(
                    "EnvFleet actors are never detached: they must not outlive the driver"
                )
            ray_options.update(actor_options)
        boxed = _sandbox_options(sandbox, env)
        recipe = (
            EnvRecipe(SandboxedEnv(str(env), lanes, boxed), dict(env_kwargs or {}))
            if boxed is not None
            else EnvRecipe(env, dict(env_kwargs or {}), num_envs=lanes, autoreset=autoreset)
        )
        self._max_restarts = max_restarts
        self._resources = dict(resources or {})
        ray = _ray()
        for what, obj in (("env", env), ("env_kwargs", env_kwargs), ("env", recipe)):
            dumps(  # here, with the object named: a failure in the actors would only say it died
                obj,
                what,
                who="EnvFleet",
                remedy="Pass a Gymnasium id / 'module:attr' string, or a class or function instead.",
            )
        init_ray()
        actor_cls = ray.remote(EnvActor)
        placements = (
            spread_over_nodes(ray, self._n, ray_options)
            if isinstance(scheduling_strategy, str) and scheduling_strategy == "SPREAD"
            else None
        )
        self._actors = [
            actor_cls.options(**{**ray_options, **(placements[i] if placements else {})}).remote(
                i, recipe, options
            )
            for i in range(self._n)
        ]
        self._closed = False
        self._finalizer = weakref.finalize(self, _kill_all, list(self._actors))
        try:
            self._infos = self._gather(starting=True)
        except BaseException:
            self.close()
            raise

    # -- what the fleet serves -------------------------------------------------------------

    @property
    def token(self) -> str:
        """The token every endpoint of the fleet requires (pass it as ``token=`` to a client
        of :attr:`addresses`; :meth:`vector_env` sends it by itself)."""
        return self._token

    @property
    def addresses(self) -> list[str]:
        """``"host:port"`` of every actor's endpoint, in actor order.

        Asks every actor; an actor that Ray is restarting is waited for (up to
        ``start_timeout_seconds``), so the list always names live endpoints.

        Raises:
            ActorLost: an actor is dead for good, or its restart could not serve.
            RequestTimeout: an actor did not answer in time.
        """
        return [info.address for info in self.info()]

    def info(self) -> list[ActorInfo]:
        """Every actor's :class:`ActorInfo` (address, node, pid, incarnation), asked afresh."""
        self._check_open()
        self._infos = self._gather(starting=False)
        return list(self._infos)

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in fleet order."""
        return list(self._actors)

    def __len__(self) -> int:
        return self._n

    @property
    def lanes(self) -> int:
        """Envs per actor, as asked."""
        return self._lanes

    @property
    def num_envs(self) -> int:
        """Lanes over the whole fleet (each endpoint's served lane count, summed)."""
        return sum(info.num_envs for info in self._infos)

    @property
    def closed(self) -> bool:
        return self._closed

    def vector_env(self, flavour: str = "gymnasium", **kwargs: Any) -> Any:
        """All endpoints as one vector env that reconnects after an actor restart.

        Wraps ``rlmesh.<flavour>.RemoteVectorEnv(fleet.addresses, token=fleet.token, **kwargs)`` (the lanes
        of actor 0 first, then actor 1's ...). When an actor dies, the next ``step`` (or
        ``reset``) raises :class:`~rlmesh.ray.LanesLost` naming the actor and its lanes;
        the following ``reset()`` waits for Ray's restart, reconnects every endpoint and
        resets. For ``"gymnasium"`` the result is a ``gymnasium.vector.VectorEnv``.

        Args:
            flavour: ``"gymnasium"`` (default), ``"numpy"``, ``"torch"`` or ``"jax"``.
            **kwargs: Passed to the flavour's ``RemoteVectorEnv`` (timeouts ...).

        Raises:
            ValueError: an unknown flavour.
        """
        if flavour not in _FLAVOURS:
            raise ValueError(
                f"flavour must be one of {', '.join(map(repr, _FLAVOURS))}, got {flavour!r}"
            )
        self._check_open()
        kwargs.setdefault("token", self._token)
        return open_fleet_vector_env(self, flavour, kwargs)

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every actor: each server stops and closes its env, then Ray kills the actor.

        When this returns, no endpoint of the fleet accepts connections. Idempotent; safe
        after ``ray.shutdown()`` (the actors died with it).
        """
        if self._closed:
            return
        self._closed = True
        actors, self._actors = self._actors, []
        self._finalizer.detach()
        ray = _ray()
        if not ray.is_initialized():
            return
        refs = []
        for index, actor in enumerate(actors):
            if (
                index not in self._serving
            ):  # never served (not placed, or its env failed): nothing to drain
                continue
            with contextlib.suppress(Exception):
                refs.append(actor.close.remote())
        deadline = time.monotonic() + _CLOSE_SECONDS
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        _kill_all(actors)

    def __enter__(self) -> EnvFleet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.num_envs} lanes"
        return f"<EnvFleet n={self._n} lanes={self._lanes} ({state})>"

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionLost("this EnvFleet is closed; start a new one")

    def _gather(self, *, starting: bool) -> list[ActorInfo]:
        ray = _ray()
        exceptions = importlib.import_module("ray.exceptions")
        refs = [actor.info.remote() for actor in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self._timeout)
        done = set(ready)
        infos: list[ActorInfo] = []
        error: Exception | None = None
        for index, ref in enumerate(refs):  # get every ready answer: Ray warns about unread errors
            if ref not in done:
                error = error or self._timeout_error(index, starting)
                continue
            try:
                infos.append(ray.get(ref))
                self._serving.add(index)
            except exceptions.RayTaskError as exc:  # the env's own error, raised in the actor
                cause = getattr(exc, "cause", None) or exc
                what = f"actor {index} of the fleet could not serve its env: {type(cause).__name__}: {cause}"
                lost: Exception = (
                    FleetStartError(what)
                    if starting
                    else ActorLost(f"{what} (after a restart); close the fleet", index=index)
                )
                lost.__cause__ = cause
                error = error or lost
            except exceptions.RayActorError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                what = (
                    f"actor {index} of the fleet is dead and Ray will not restart it "
                    f"(max_restarts={self._max_restarts} used up, or it was killed for good): {first}"
                )
                lost = (
                    FleetStartError(what)
                    if starting
                    else ActorLost(f"{what}; close the fleet and start a new one", index=index)
                )
                lost.__cause__ = exc
                error = error or lost
        if error is not None:
            raise error
        return infos

    def _timeout_error(self, index: int, starting: bool) -> Exception:
        if starting:
            asked = f" each holding {self._resources}" if self._resources else ""
            return FleetStartTimeout(
                f"actor {index} of {self._n}{asked} was not serving within {self._timeout:.0f}s: the cluster may "
                "lack the resources (`ray status` shows what is free), or the env is slow to build "
                "(raise start_timeout_seconds)"
            )
        return RequestTimeout(
            f"actor {index} of the fleet did not report its address within {self._timeout:.0f}s "
            "(is Ray still restarting it?)",
            timeout_seconds=self._timeout,
        )


def _kill_all(actors: Sequence[Any]) -> None:
    """``ray.kill`` every actor for good (no restart); quiet when Ray is already down."""
    try:
        ray = importlib.import_module("ray")
        if not ray.is_initialized():
            return
    except Exception:
        return
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
