"""Env targets: classify what ``run``/``session`` were given and open it (EVAL-6..8, EVAL-30/31).

One precedence for every entry point (EVAL-6):

1. ``str`` -> an address, dialed with ``rlmesh.numpy.RemoteEnv`` (or ``RemoteVectorEnv``);
   a string that cannot be an address (``transport.looks_like_address``) but names a
   Gymnasium id this process can make (:func:`rlmesh._gymid.ensure_registered`) is made
   locally with ``gymnasium.make`` and closed with the session; any other string is
   refused in one line naming both choices (:func:`classify_string`);
2. ``reset`` + ``step`` + a *real* ``env_contract`` -> a remote handle, driven through
   its own connection and never closed by the session (unless ``close_env``);
3. ``reset`` + ``step`` -> a local env, driven in-process (DESIGN: no loopback server);
4. ``make`` -> an ``EnvFactory`` (instantiated if a class; ``prepare()``; ``make()``);
5. a string ``address`` attribute (e.g. ``EnvServer``) -> dialed, with the object's
   ``token`` when it has one (a token-protected ``EnvServer`` is driven with no more code).

Attributes are probed on the type and the instance ``__dict__`` only, never through
``getattr`` forwarding (EVAL-7: Gymnasium wrappers' deprecated ``__getattr__``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .._autoreset import Autoreset
from .._contract import EnvContract
from .._envkit.classify import declared_autoreset, is_vector_env, spec_id, vector_lanes
from .._gymid import ensure_registered, make_gym_env
from ..authoring import EnvFactory, build_env
from ..client._numpy import RemoteEnv, RemoteVectorEnv
from ..errors import DependencyMissing, InvalidEnvTarget, UnknownEnvId
from ..spaces._gym import as_spec
from ..transport.address import looks_like_address

__all__ = ["EnvConn", "LocalContract", "classify_string", "classify_target", "open_target"]

#: What an env string may be, for the one-line refusal.
_ADDRESS_FORMS = "host:port, tcp://host:port or unix:///path"
_FIX = (
    "pass a served env's address, or a Gymnasium id such as 'CartPole-v1' (a namespaced id "
    "needs its package installed, or Gymnasium's 'module:EnvId' spelling)"
)


def classify_string(text: str) -> str:
    """``"address"`` or ``"gymid"`` for an env string; any other string is refused.

    A string spelled as an address (``host:port``, ``[v6]:port``, ``scheme://...``, a bare
    port) is an address, always: ``"localhost:5555"`` is never taken for an id. Any
    other string is a Gymnasium id if this process can make it: registered already,
    or registered by the package :func:`rlmesh._gymid.ensure_registered` finds and
    imports (a namespaced id's package, Gymnasium's ``"module:EnvId"``).

    >>> classify_string("127.0.0.1:5555"), classify_string("CartPole-v1")
    ('address', 'gymid')

    Raises:
        InvalidEnvTarget: neither (a ``ValueError``); one line naming both choices.
    """
    if looks_like_address(text):
        return "address"
    try:
        ensure_registered(text)
    except DependencyMissing:
        reason = 'gymnasium is not installed: pip install gymnasium, the "gymnasium" extra'
    except UnknownEnvId:
        reason = f"no installed package registers it{_close_ids(text)}"
    except ImportError as exc:  # "module:EnvId" with no such module, or a broken package
        reason = f"{type(exc).__name__}: {exc}"
    else:
        return "gymid"
    raise InvalidEnvTarget(
        f"env {text!r} is neither an address ({_ADDRESS_FORMS}) nor a registered Gymnasium id "
        f"({reason}): {_FIX}",
        env_id=text,
    )


def _close_ids(text: str) -> str:
    """``"; did you mean 'CartPole-v1'?"`` when registered ids are close to ``text``."""
    import difflib

    try:
        import gymnasium
    except ImportError:
        return ""
    near = difflib.get_close_matches(text, list(gymnasium.registry), n=3, cutoff=0.75)
    return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""


def _static_has(obj: Any, name: str) -> bool:
    """Whether ``name`` is defined on ``type(obj)``'s MRO or in ``obj.__dict__`` (no ``__getattr__``)."""
    try:
        if name in vars(obj):
            return True
    except TypeError:
        pass
    return any(name in vars(klass) for klass in type(obj).__mro__)


def _static_get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if _static_has(obj, name) else default


def classify_target(target: Any, *, served: bool = False) -> str:
    """The kind of an env target: ``address``, ``remote``, ``local``, ``factory`` or ``server`` (EVAL-6).

    ``served=True`` words the error for a served-model session, whose env may also be
    an env client exposing ``env_contract`` (seed ``types.EnvTarget``, MOD-41).

    Raises:
        TypeError: none of the accepted forms.
    """
    if isinstance(target, str):
        return classify_string(target)
    has_reset_step = callable(getattr(target, "reset", None)) and callable(
        getattr(target, "step", None)
    )
    if has_reset_step and not isinstance(target, type):
        return "remote" if _static_has(target, "env_contract") else "local"
    if callable(getattr(target, "make", None)):
        return "factory"
    if isinstance(getattr(target, "address", None), str):
        return "server"
    contract_only = _static_has(target, "env_contract")
    extra = (
        "; an object exposing only env_contract cannot be stepped (pass the client itself)"
        if contract_only
        else ""
    )
    if isinstance(target, type) and has_reset_step:
        extra = f"; {target.__name__} is a class -- pass an instance ({target.__name__}(...))"
    client = (
        "an env client exposing env_contract (e.g. RemoteEnv)" if served else "a remote env client"
    )
    raise TypeError(
        "env must be a live env with reset() and step(), an EnvFactory (class or instance), an "
        f"object with an `address` (e.g. EnvServer), {client}, an address string "
        f"like '127.0.0.1:5555', or a Gymnasium id like 'CartPole-v1'; got "
        f"{type(target).__name__}{extra}"
    )


@dataclass(eq=False, repr=False)
class LocalContract:
    """A contract synthesized from a local env when its spaces cannot be converted (EVAL-7)."""

    id: str
    observation_space: Any
    action_space: Any
    _: KW_ONLY
    render_mode: str | None
    num_envs: int
    metadata: Mapping[str, Any] | None
    autoreset_mode: str

    def __repr__(self) -> str:
        return f'EnvContract(id="{self.id}", num_envs={self.num_envs})'


def local_contract(env: Any, *, vector: bool, num_envs: int) -> Any:
    """Synthesize a contract for a local env: metadata, spaces and ``num_envs`` (EVAL-7).

    The autoreset mode is read as a served endpoint reads it (AR-1): a vector env
    declaring none is NextStep, an unknown mode is refused.

    Raises:
        ValueError: a vector env declares an unknown ``metadata["autoreset_mode"]``.
    """
    metadata = _static_get(env, "metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        metadata = None
    spec = _static_get(env, "spec")
    ident = spec_id(spec)  # SRV-11, as a server names it
    render_mode = _static_get(env, "render_mode")
    obs_space = _static_get(env, "single_observation_space") if vector else None
    act_space = _static_get(env, "single_action_space") if vector else None
    if obs_space is None:
        obs_space = _static_get(env, "observation_space")
    if act_space is None:
        act_space = _static_get(env, "action_space")
    mode = declared_autoreset(metadata) if vector else "Disabled"
    try:
        return EnvContract(
            str(ident),
            as_spec(obs_space, "observation_space"),
            as_spec(act_space, "action_space"),
            render_mode=render_mode if isinstance(render_mode, str) else None,
            num_envs=num_envs,
            metadata=metadata,
            autoreset_mode=mode,
        )
    except (
        Exception
    ):  # spaces that do not convert: keep them raw (adapters accept gymnasium spaces)
        return LocalContract(
            str(ident),
            obs_space,
            act_space,
            render_mode=render_mode if isinstance(render_mode, str) else None,
            num_envs=num_envs,
            metadata=metadata,
            autoreset_mode=mode,
        )


@dataclass(eq=False)
class EnvConn:
    """An opened env: the object to call plus what the session owns of it.

    Attributes:
        env: The object whose ``reset``/``step`` the session calls.
        contract: The env's contract (published by a client, synthesized for a local env).
        num_envs: Lanes (1 for a scalar env).
        is_vector: Whether the env speaks the batched vector API.
        remote: Whether ``env`` is a client (it negotiated a workflow edition).
        step: ``env.step``. A session reads and checks a local scalar env's step as a
            served endpoint does (``rlmesh._envkit.checks.local_scalar_step``).
        per_lane_reset: Whether lanes can be reset individually (gymnasium ``reset_mask``).
    """

    env: Any
    contract: Any
    _: KW_ONLY
    remote: bool
    dialed: bool = False
    built: bool = False
    factory: Any = None
    owns_factory: bool = False
    user_obj: Any = None
    # Read from the env and its contract by __post_init__:
    num_envs: int = field(init=False)
    is_vector: bool = field(init=False)
    autoreset_mode: str = field(init=False)
    #: How the driver resets single lanes: "mask" (gymnasium reset_mask),
    #: "indices" (a RemoteVectorEnv lanes endpoint), or "" (the env autoresets).
    per_lane_reset: str = field(init=False, default="")
    #: A remote autoresetting endpoint that may reset single lanes (a lanes endpoint or a
    #: served Gymnasium vector env does, AR-10; a duck-typed NEXT_STEP env answers
    #: UNSUPPORTED): tried only when a run needs it.
    autoreset_indices: bool = field(init=False, default=False)
    metadata: Mapping[str, Any] | None = field(init=False)
    step: Any = field(init=False)

    def __post_init__(self) -> None:
        env, contract = self.env, self.contract
        num = getattr(contract, "num_envs", 1)
        self.num_envs = int(num) if isinstance(num, int) else 1
        self.is_vector = is_vector_env(env)  # SRV-3, as a server classifies it
        if self.is_vector:
            self.num_envs = vector_lanes(env) or self.num_envs
        self.autoreset_mode = str(getattr(contract, "autoreset_mode", "NextStep"))
        if self.is_vector:
            if _is_gymnasium_vector(env):
                self.per_lane_reset = "mask"
            elif _takes_kw(env.reset, "env_indices"):
                if self.autoreset_mode == Autoreset.DISABLED:
                    self.per_lane_reset = "indices"
                elif self.remote:
                    self.autoreset_indices = True
        self.metadata = getattr(contract, "metadata", None)
        self.step = env.step

    @property
    def action_space(self) -> Any:
        return _static_get(self.env, "action_space")

    @property
    def single_action_space(self) -> Any:
        if self.is_vector:  # a duck-typed vector env may only have the per-lane action_space
            single = _static_get(self.env, "single_action_space")
            return single if single is not None else self.action_space
        return self.action_space

    def close(self, *, close_env: bool) -> None:
        """Release what the session owns (EVAL-30/31, DELTA-48/51); every step runs, first error re-raised."""
        errors: list[BaseException] = []

        def attempt(fn: Any) -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        stopped_via_close = False
        if close_env:  # EVAL-31: the first of shutdown() / close() the env exposes
            shutdown = getattr(self.env, "shutdown", None)
            if callable(shutdown):
                attempt(shutdown)
            else:
                closer = getattr(self.env, "close", None)
                if callable(closer):
                    attempt(closer)
                stopped_via_close = True
        if (self.dialed or self.built) and not stopped_via_close:
            closer = getattr(self.env, "close", None)
            if callable(closer):
                attempt(closer)
        if self.owns_factory and self.factory is not None:
            closer = getattr(self.factory, "close", None)
            if callable(closer):
                attempt(closer)
        if errors:
            raise errors[0]


def _is_gymnasium_vector(env: Any) -> bool:
    try:
        from gymnasium.vector import VectorEnv
    except ImportError:  # pragma: no cover - gymnasium missing: no local vector envs either
        return False
    if not isinstance(env, VectorEnv):
        return False
    try:
        return "options" in inspect.signature(env.reset).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _takes_kw(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class _DialedEnv(RemoteEnv):
    """Dials an address once and becomes the client its handshake's contract asks for.

    A single-env endpoint stays a :class:`RemoteEnv`; an endpoint serving lanes
    (``num_envs > 1``) becomes a :class:`RemoteVectorEnv` before the client binds its
    value plans -- decided from the contract the handshake published, not by dialing
    again after reading an error message.
    """

    def _check_arity(self, contract: EnvContract, url: str) -> None:
        self.__class__ = RemoteVectorEnv if contract.num_envs > 1 else RemoteEnv  # type: ignore[assignment]


def _dial(
    address: str, *, workflow_edition: str | None, token: str | None = None
) -> tuple[Any, Any]:
    """Dial ``address`` once with the numpy clients; return ``(client, contract)`` (EVAL-6)."""
    kwargs: dict[str, Any] = {}
    if workflow_edition is not None:
        kwargs["workflow_edition"] = workflow_edition
    if token is not None:
        kwargs["token"] = token
    client: Any = _DialedEnv(address, **kwargs)
    return client, client.env_contract


def open_target(
    target: Any, kind: str, *, workflow_edition: str | None = None, render: bool = False
) -> EnvConn:
    """Open a classified target (the session's lazy connect, EVAL-10).

    ``render`` makes a Gymnasium id with ``render_mode="rgb_array"`` (a viewer watches).
    """
    if kind == "gymid":
        env = make_gym_env(target, **({"render_mode": "rgb_array"} if render else {}))
        return _local_conn(env, user_obj=target, built=True)
    if kind == "address":
        client, contract = _dial(target, workflow_edition=workflow_edition)
        return EnvConn(client, contract, remote=True, dialed=True, user_obj=target)
    if kind == "server":
        token = _static_get(target, "token")
        client, contract = _dial(
            target.address,
            workflow_edition=workflow_edition,
            token=token if isinstance(token, str) and token else None,
        )
        return EnvConn(client, contract, remote=True, dialed=True, user_obj=target)
    if kind == "remote":
        return EnvConn(target, target.env_contract, remote=True, user_obj=target)
    if kind == "local":
        return _local_conn(target, user_obj=target)
    if kind == "factory":
        return _factory_conn(target)
    raise AssertionError(f"unknown target kind {kind!r}")  # pragma: no cover


def _local_conn(
    env: Any, *, user_obj: Any, built: bool = False, factory: Any = None, owns_factory: bool = False
) -> EnvConn:
    lanes = vector_lanes(env)
    vector = lanes is not None
    num_envs = lanes or 1
    contract = local_contract(env, vector=vector, num_envs=num_envs)
    return EnvConn(
        env,
        contract,
        remote=False,
        built=built,
        factory=factory,
        owns_factory=owns_factory,
        user_obj=user_obj,
    )


def _factory_conn(target: Any) -> EnvConn:
    owns = isinstance(target, type)
    if isinstance(target, EnvFactory) or (owns and issubclass(target, EnvFactory)):
        factory, env = build_env(target)
    else:  # a duck factory: anything with make()
        factory = target() if owns else target
        prepare = getattr(factory, "prepare", None)
        if callable(prepare):
            prepare()
        env = factory.make()
    if isinstance(env, list):
        raise TypeError(
            f"{type(factory).__name__}.make() returned a list of {len(env)} lane envs; a session "
            "drives one env (or a gymnasium vector env) -- serve the lanes with rlmesh.EnvServer instead"
        )
    kind = classify_target(env)
    if kind == "remote":
        conn = EnvConn(
            env,
            env.env_contract,
            remote=True,
            built=True,
            factory=factory,
            owns_factory=owns,
            user_obj=target,
        )
    else:
        conn = _local_conn(env, user_obj=target, built=True, factory=factory, owns_factory=owns)
    return conn
