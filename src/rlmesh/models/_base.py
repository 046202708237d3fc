"""``ModelBase`` and ``rlmesh.Model``: a prediction function with a lifecycle (MOD-1..15, DELTA-28..36).

Three ways to make a model, one base:

- **wrap** a bare callable: ``Model(fn)`` -- ``fn`` is ``predict``;
- **wrap a policy object** (or class) exposing ``predict`` and optionally the other
  corners, ``reset`` (episode-end hook), ``close`` and ``spec``;
- **subclass** and override one or more corners; ``load()`` runs once in ``__init__``
  and ``on_episode_end(episode_id)`` marks episode ends.

The corners are normalized and the missing ones derived once, at construction
(:mod:`rlmesh.models._corners`). Sessions read ``model._corners``; nothing on the
per-step path inspects signatures.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._corners import CORNER_NAMES, CornerSet, build_corners
from ._values import Bridge, get_bridge

if TYPE_CHECKING:
    from ..eval._results import RunResult
    from ..eval._session import Session

__all__ = ["Model", "ModelBase"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


def _episode_end_caller(hook: Callable[..., Any]) -> Callable[[str], None]:
    """Call ``hook(episode_id)`` if it takes a positional parameter (or ``*args``), else ``hook()`` (DELTA-28)."""
    try:
        params = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        return lambda episode_id: hook()
    takes = any(
        p.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )
        for p in params
    )
    if takes:
        return lambda episode_id: hook(episode_id)
    return lambda episode_id: hook()


def _wrap_close(fn: Callable[[Any], Any]) -> Callable[[Any], None]:
    """Make a subclass ``close`` override idempotent and always release (DELTA-29)."""

    @functools.wraps(fn)
    def close(self: ModelBase[Any, Any]) -> None:
        if self.__dict__.get("_closed", False):
            return
        self.__dict__["_closed"] = True
        try:
            hook = self.__dict__.get("_close_hook")
            if hook is not None:  # MOD-7: an explicit on_close= replaces the override
                hook()
            else:
                fn(self)
        finally:
            self._release()

    close.__rlmesh_close__ = True  # type: ignore[attr-defined]
    return close


class ModelBase(Generic[ObsT, ActT]):
    """The model base shared by every backend flavour (MOD-1).

    Args:
        source: A bare ``predict`` callable, or a policy object/class exposing
            ``predict``; ``None`` for a subclass that overrides a corner.
        spec: The adapter spec (``rlmesh.adapters.ModelSpec``), ``rlmesh.NO_ADAPTER``,
            or ``None``. Wins over the class/policy ``spec`` attribute.
        on_episode_end: Zero- or one-argument callback fired at each episode end
            (receives the episode id if it takes a positional parameter).
        on_close: Zero-argument callback fired once by :meth:`close`.
        trust_entrypoints: Allow ``Custom(entrypoint=...)`` spec inputs to import code.

    Raises:
        TypeError: ``source`` is a model, is neither callable nor a policy, or no
            corner is defined; ``native_chunk`` without a chunk corner; a chunk-only
            ``rlmesh.Model`` (MOD-15).

    Class attributes: ``spec``, ``params`` (a ``ParamSpec``; advisory), ``device``
    (torch/jax only), ``allow_fusion``, ``native_chunk`` (declared chunk length K)
    and ``workflow_edition``.

    >>> m = Model(lambda obs: 0)
    >>> m
    Model()
    """

    spec: ClassVar[Any] = None
    params: ClassVar[Any] = None
    device: Any = None
    allow_fusion: ClassVar[bool] = True
    native_chunk: int | None = None
    workflow_edition: ClassVar[str | None] = None
    #: The value bridge this flavour uses at the predict seam.
    _bridge_name: ClassVar[str] = "plain"
    #: Whether this flavour may carry a ``device`` (torch/jax only, MOD-26).
    _supports_device: ClassVar[bool] = False

    _corners: CornerSet
    _bridge: Bridge

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "reset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}.reset is never called: the Model episode hook is "
                "on_episode_end(self, episode_id='') -- rename reset to on_episode_end "
                "(it runs once at the end of every episode)"
            )
        close = cls.__dict__.get("close")
        if close is not None and not getattr(close, "__rlmesh_close__", False):
            setattr(cls, "close", _wrap_close(close))  # noqa: B010 - wraps the override in place

    def __init__(
        self,
        source: Any = None,
        *,
        spec: Any = None,
        on_episode_end: Callable[..., Any] | None = None,
        on_close: Callable[[], Any] | None = None,
        trust_entrypoints: bool = False,
    ) -> None:
        self._setup(source, spec, on_episode_end, on_close, trust_entrypoints, auto_load=True)

    # -- construction --------------------------------------------------------------------

    def _setup(
        self,
        source: Any,
        spec: Any,
        on_episode_end: Callable[..., Any] | None,
        on_close: Callable[[], Any] | None,
        trust_entrypoints: bool,
        *,
        auto_load: bool,
    ) -> None:
        cls = type(self)
        bridge = get_bridge(cls._bridge_name)
        bridge.ensure_available()  # MOD-1
        self._bridge = bridge
        self._closed = False
        self._trust_entrypoints = bool(trust_entrypoints)
        self._policy: Any = None
        self._wrapped = source is not None
        self._close_hook: Callable[[], Any] | None = on_close
        end_hook: Callable[..., Any] | None = on_episode_end
        defined: dict[str, Callable[..., Any]]
        if source is not None:
            if isinstance(source, ModelBase) or (
                isinstance(source, type) and issubclass(source, ModelBase)
            ):
                name = source.__name__ if isinstance(source, type) else type(source).__name__
                raise TypeError(
                    f"{cls.__name__}(source) got the model {name}; a Model subclass is not wrapped. "
                    f"Instantiate your Model subclass directly ({name}()) or pass it to rlmesh.run "
                    "as is"
                )
            if callable(getattr(source, "predict", None)):  # MOD-4: policy before bare callable
                policy = source() if isinstance(source, type) else source
                self._policy = policy
                defined = {
                    n: getattr(policy, n)
                    for n in CORNER_NAMES
                    if callable(getattr(policy, n, None))
                }
                if spec is None:
                    spec = getattr(policy, "spec", None)
                if end_hook is None and callable(getattr(policy, "reset", None)):
                    end_hook = policy.reset
                if self._close_hook is None and callable(getattr(policy, "close", None)):
                    self._close_hook = policy.close
            elif callable(source):  # MOD-3
                defined = {"predict": source}
            else:
                raise TypeError(
                    f"{cls.__name__}(source) needs a predict callable or a policy object with a "
                    f"predict() method, got {type(source).__name__}"
                )
        else:  # MOD-6: subclass mode
            defined = {
                n: getattr(self, n)
                for n in CORNER_NAMES
                if getattr(cls, n) is not getattr(ModelBase, n)
            }
            if not defined:
                raise TypeError(
                    f"{cls.__name__}() needs a predict callable or an overridden corner: pass "
                    f"{cls.__name__}(predict_fn) or define predict / predict_chunk / "
                    "predict_batch / predict_chunk_batch on a subclass"
                )
            if spec is None:
                spec = cls.spec
            if end_hook is None and cls.on_episode_end is not ModelBase.on_episode_end:
                end_hook = self.on_episode_end
        self._spec = spec
        # The public attribute reports the resolved spec, not just the class attribute (CNF2-A4).
        object.__setattr__(self, "spec", spec)
        self._corners = build_corners(defined, bridge, owner=cls.__name__)
        self._end_hook = None if end_hook is None else _episode_end_caller(end_hook)
        if cls.native_chunk is not None and not self._corners.has_chunk:
            raise TypeError(
                f"{cls.__name__}.native_chunk={cls.native_chunk} declares a chunk length but the "
                "model defines no predict_chunk / predict_chunk_batch"
            )
        if source is None and auto_load:
            self.load()

    @classmethod
    def from_config(cls, **config: Any) -> ModelBase[Any, Any]:
        """Build the subclass and call ``load(**config)`` once, validated (DELTA-35).

        The keywords are checked against ``load``'s signature and the class
        ``params`` (``params=None``: the signature is the contract, as if
        ``ParamSpec(extra="passthrough")`` were declared).

        Raises:
            TypeError: the class authors no corner.
            rlmesh.params.ParamError: the binding does not fit ``load``.
        """
        if not any(getattr(cls, n) is not getattr(ModelBase, n) for n in CORNER_NAMES):
            raise TypeError(
                f"{cls.__name__}.from_config() needs a subclass that defines a corner "
                "(predict / predict_chunk / predict_batch / predict_chunk_batch)"
            )
        from ..authoring import ParamSpec, resolve_params

        self = cls.__new__(cls)
        self._setup(None, None, None, None, False, auto_load=False)
        spec = cls.params if cls.params is not None else ParamSpec(extra="passthrough")
        resolved = resolve_params(spec, self.load, config, where=f"{cls.__name__}.load()")
        self.load(**resolved)
        return self

    # -- lifecycle -----------------------------------------------------------------------

    def load(self, **kwargs: Any) -> None:
        """One-time setup, called once from ``__init__`` in subclass mode (no-op default)."""

    def on_episode_end(self, episode_id: str = "") -> None:
        """Called once at the end of every episode with its id (no-op default, DELTA-28)."""

    def close(self) -> None:
        """Release the model: fire ``on_close`` (or a policy's ``close``) once; idempotent (DELTA-29).

        ``run`` and ``session`` never call this on a model instance you pass in;
        a model they built from a class is closed when the call/session ends.
        """
        if self.__dict__.get("_closed", False):
            return
        self._closed = True
        try:
            if self._close_hook is not None:
                self._close_hook()
        finally:
            self._release()

    def _release(self) -> None:
        """Drop runtime state (the served-model worker lands here later)."""

    def _on_bind(self, contract: Any, *, instruction: str | None, lanes: int) -> None:
        """A route bound this model to an env (its contract); a no-op by default.

        A model that reads the env itself overrides it (``rlmesh.openpi.PolicyClient``
        compiles its observation map against the contract and takes the instruction).
        """

    def _fire_episode_end(self, episode_id: str) -> None:
        if self._end_hook is not None:
            self._end_hook(episode_id)

    # -- corners (base versions call a wrapped/derived corner, else NotImplementedError) --

    def _corner(self, name: str) -> Any:
        cs = self.__dict__.get("_corners")
        if cs is None:
            return None
        fn = getattr(cs, name)
        if fn is not None and (self.__dict__.get("_wrapped", False) or name not in cs.defined):
            return fn
        return None

    def predict(self, observation: ObsT) -> ActT:
        """Map one observation to one action (MOD-12)."""
        fn = self._corner("predict")
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} defines no predict()")
        action: ActT = fn(observation, None)
        return action

    def predict_chunk(self, observation: ObsT, execution_horizon: int = 1) -> Any:
        """Map one observation to an ``[H, ...]`` chunk of actions (MOD-12)."""
        fn = self._corner("predict_chunk")
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} defines no predict_chunk()")
        return fn(observation, execution_horizon, None)

    def predict_batch(self, observations: Any) -> Any:
        """Map ``[N, ...]`` observations to ``[N, ...]`` actions (MOD-12)."""
        fn = self._corner("predict_batch")
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} defines no predict_batch()")
        return fn(observations, None)

    def predict_chunk_batch(self, observations: Any, execution_horizon: int = 1) -> Any:
        """Map ``[N, ...]`` observations to ``[N, H, ...]`` chunks (MOD-12)."""
        fn = self._corner("predict_chunk_batch")
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} defines no predict_chunk_batch()")
        return fn(observations, execution_horizon, None)

    # -- running -------------------------------------------------------------------------

    def session(
        self,
        env_or_address: Any,
        *,
        instruction: str | None = None,
        close_env: bool = False,
        trust_entrypoints: bool | None = None,
        execution_horizon: int = 1,
        view: Any = None,
        workflow_edition: str | None = None,
    ) -> Session[ObsT, ActT]:
        """Bind this model to an env: ``rlmesh.session(self, env, ...)`` (EVAL-2)."""
        given = _keywords(locals())
        from ..eval._api import session

        return session(self, env_or_address, **given)

    def run(
        self,
        env_or_address: Any,
        *,
        seeds: Sequence[int] | None = None,
        max_episodes: int | None = None,
        episodes: int | None = None,
        max_episode_steps: int | None = None,
        max_episode_seconds: float | None = None,
        hooks: Any = None,
        instruction: str | None = None,
        close_env: bool = False,
        trust_entrypoints: bool | None = None,
        execution_horizon: int = 1,
        view: Any = None,
        workflow_edition: str | None = None,
        trial_index_base: int = 0,
        prefetch_lead: int = 0,
        workers: Any = None,
        journal: Any = None,
        progress: bool | None = None,
        episode_timeout_seconds: float | None = None,
    ) -> RunResult:
        """Drive whole episodes against an env and return a ``RunResult``: ``rlmesh.run(self, ...)`` (EVAL-2).

        ``workers=`` / ``journal=`` / ``episode_timeout_seconds=`` spread the episodes over
        worker processes or Ray (``rlmesh.Workers``; see docs/distributed.md); ``progress=``
        is ``rlmesh.run``'s live line (``None``: on a terminal).
        """
        given = _keywords(locals())
        from ..eval._api import run

        return run(self, env_or_address, **given)

    def serve(
        self,
        address: str | None = None,
        *,
        options: Any = None,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
    ) -> None:
        """Host this model for :class:`rlmesh.RemoteModel` clients; blocks until shutdown (MOD-33).

        The env contract arrives at bind and the model's adapter is resolved here;
        episode ends fire :meth:`on_episode_end`. Use ``rlmesh.serve.ModelServer``
        for a background server.
        """
        from ..serve import ModelServer

        ModelServer(
            self, address, host=host, port=port, path=path, transport=transport, options=options
        ).serve()

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """This model class's metadata envelope: ``rlmesh.describe(cls, kind="model")``."""
        from ..authoring import describe

        return describe(cls, kind="model")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # MOD-10


def declared_spec(model: Any) -> Any:
    """The spec a model instance declared (resolved at construction), or ``None``.

    Duck-typed: any object may be asked (one that is no ``Model`` declares none).
    """
    return getattr(model, "_spec", None)


def check_device(model: Any) -> None:
    """MOD-26: only a torch/jax model takes a ``device``.

    Raises:
        ValueError: a device on a numpy or native model.
    """
    device = getattr(model, "device", None)
    if device is not None and not getattr(type(model), "_supports_device", False):
        raise ValueError(
            f"{type(model).__name__}.device={device!r} requires a torch/jax model; "
            "numpy and native models run on the host -- set device=None"
        )


def _keywords(names: dict[str, Any]) -> dict[str, Any]:
    """A porch's keyword arguments (its ``locals()`` minus ``self`` and the env), forwarded as given."""
    return {k: v for k, v in names.items() if k not in ("self", "env_or_address")}


class Model(ModelBase[ObsT, ActT]):
    """Wrap a Python prediction function as a native-value model (seed 000).

    ``predict`` sees :class:`rlmesh.Tensor` leaves (numpy scalars become Python
    scalars) and returns native values; batched corners receive a per-lane
    ``list`` (no fusion), and a chunk corner cannot stand in for ``predict``
    (MOD-15). Use :class:`rlmesh.numpy.Model` for numpy arrays.

    >>> Model(lambda obs: 1).predict(None)
    1
    """

    _bridge_name: ClassVar[str] = "plain"
