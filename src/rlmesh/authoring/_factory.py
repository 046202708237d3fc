"""``EnvFactory``: the authoring base that declares and builds environments (AUTH-1..5).

A factory is a class, so everything about an env can be read before anything
is built: its adapter ``tags`` (the obs/action contract), its construction
``params``, an optional catalog of named variants, and the contract branches
selected by ``tag_params``. ``make(**kwargs)`` builds the env; the base class
wraps every subclass's ``make`` once so the returned env carries the
factory's tags, contract branch and reserved reset options in
``env.metadata`` (AUTH-2, DELTA-56/57), whether it is served or driven
locally.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, final

from .. import _keys
from .._autoreset import Autoreset
from .._envkit.classify import Lanes, autoreset_name
from ..adapters import EnvTags, tag
from ..errors import DependencyMissing
from ._params import ParamError, ParamSpec
from ._resolve import binding_metadata, resolve_params
from ._sig import json_safe

if TYPE_CHECKING:
    from ..types import EnvLike

__all__ = [
    "ENV_BRANCH_METADATA_KEY",
    "ENV_METADATA_KEY",
    "ENV_RESET_OPTIONS_KEY",
    "MAX_CONTRACT_BRANCHES",
    "EnvFactory",
    "build_env",
    "contract_branches",
]

#: Metadata key listing the reserved reset options an env accepts (DELTA-47).
ENV_RESET_OPTIONS_KEY = _keys.ENV_RESET_OPTIONS_KEY
#: Where adapter env tags ride in env metadata (ADP-49); same value as rlmesh.adapters'.
ENV_METADATA_KEY = _keys.ENV_TAGS_KEY
#: Where the selected contract branch rides in env metadata (DELTA-56).
ENV_BRANCH_METADATA_KEY = _keys.ENV_BRANCH_KEY
#: The most contract branches ``tag_params`` may span (DELTA-56).
MAX_CONTRACT_BRANCHES = 8
_VECTORIZATION_MODES = (None, "sync", "async")
_DEVICE_FRAMEWORKS = ("torch", "jax")


class EnvFactory(ABC):
    """Authoring base that builds environment(s): set ``tags`` and implement ``make``.

    Subclass per obs/action contract: the ``tags`` (an
    :class:`rlmesh.adapters.EnvTags`) are that contract, and ``tags = None``
    means a generic, un-adapted env. ``make(**kwargs)`` may return one env or
    a vectorized batch; task selection and ``num_envs`` are its parameters,
    not separate subclasses.

    Optional class attributes:
        params: A :class:`~rlmesh.params.ParamSpec` declaring ``make``'s
            parameters; a bad binding is rejected before construction.
        tag_params: Names of declared ``Param`` s (with ``choices``) whose value
            selects a different obs/action contract; ``tags_for(**values)``
            returns each branch's tags (DELTA-56). At most 8 branches.
        reset_options: Reserved reset options the env accepts, e.g.
            ``("trial_index",)`` (DELTA-47).
        workflow_edition: The workflow edition this factory is written
            against, e.g. ``"2026.06"`` (DELTA-7 rung 4).

    Optional classmethods (not defined here, so describe can tell whether you
    did): ``enumerate_variants()`` returning/yielding :class:`Variant` s, and
    ``enumerate_params()`` returning ``{axis: [values]}`` sweep axes.

    Example:
        >>> from rlmesh.params import Param, ParamSpec
        >>> class Counter(EnvFactory):
        ...     params = ParamSpec(Param("limit", int))
        ...     def make(self, limit: int = 3):
        ...         return {"limit": limit}  # any env object
        >>> Counter().make(limit=5)
        {'limit': 5}
    """

    tags: ClassVar[EnvTags | None] = None
    params: ClassVar[ParamSpec | None] = None
    tag_params: ClassVar[tuple[str, ...]] = ()
    reset_options: ClassVar[tuple[str, ...]] = ()
    workflow_edition: ClassVar[str | None] = None
    #: Framework pin (``"numpy"``/``"torch"``/``"jax"`` or a bridge); set by the backend facades.
    _bridge: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        make = cls.__dict__.get("make")
        if (
            inspect.isfunction(make)
            and not getattr(make, "__isabstractmethod__", False)
            and not getattr(make, "__rlmesh_stamped__", False)
        ):
            cls.make = _stamping(make)  # type: ignore[method-assign]  # AUTH-2
        for attr in ("tag_params", "reset_options"):
            if attr not in cls.__dict__:
                continue
            value = cls.__dict__[attr]
            if isinstance(value, str) or not all(isinstance(v, str) for v in value or ()):
                hint = f"; write {attr} = ({value!r},)" if isinstance(value, str) else ""
                raise TypeError(
                    f"{cls.__qualname__}.{attr} must be a tuple of strings, got {value!r}{hint}"
                )
            setattr(cls, attr, tuple(value or ()))
        if cls.params is not None and not isinstance(cls.params, ParamSpec):
            raise TypeError(
                f"{cls.__qualname__}.params must be a ParamSpec or None, got {type(cls.params).__name__}"
            )
        _check_branches(cls)

    def prepare(self) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Optional one-time setup before :meth:`make` (e.g. download assets)."""

    @abstractmethod
    def make(self, **kwargs: Any) -> EnvLike[Any, Any]:
        """Construct and return the environment.

        Return a plain env: the base class stamps this factory's tags (and
        contract branch, reset options) into ``env.metadata``, so a spec'd
        model can resolve its adapter from the env alone.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Optional: release resources held by the factory (called after serving)."""

    @classmethod
    def tags_for(cls, **params: Any) -> EnvTags | None:
        """The adapter tags of the contract branch selected by ``params`` (DELTA-56).

        Override together with ``tag_params``; the default returns ``cls.tags``.
        """
        return cls.tags

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Return this factory's full metadata envelope (see :func:`rlmesh.describe`)."""
        from ._describe import describe

        return describe(cls, kind="env")

    @final
    def serve(
        self,
        address: str,
        *,
        num_envs: int = 1,
        vectorization_mode: str | None = None,
        framework: str | None = None,
        device: object | None = None,
        workflow_edition: str | None = None,
        autoreset: str | None = None,
        sessions: int = 1,
        prewarm: int = 0,
        **make_kwargs: Any,
    ) -> None:
        """Host this env on ``address`` (blocking): validate, ``prepare()``, ``make()``, serve.

        The named keywords are serving options and never reach ``make``; every
        other keyword is validated against :attr:`params` *before* anything is
        built, then passed to ``make``.

        Args:
            address: ``"host:port"``, ``"tcp://host:port"`` or ``"unix:///path"``.
            num_envs: Lanes to serve. With ``vectorization_mode=None`` the
                factory makes ``num_envs`` envs served as independent lanes,
                each tagged (DELTA-25).
            vectorization_mode: ``"sync"``/``"async"`` wraps ``num_envs`` makes in
                a Gymnasium vector env instead (served untagged).
            framework: ``"numpy"`` (default), ``"torch"`` or ``"jax"``: the type
                the env's ``step`` receives actions as; defaults to the factory's
                pinned framework.
            device: Device for torch/jax actions; ignored for numpy.
            workflow_edition: Edition to declare (DELTA-7 rung 3).
            autoreset: How lanes restart when ``num_envs > 1``: ``"next-step"``
                (the default, like ``gymnasium.make_vec``), ``"same-step"`` or
                ``"disabled"``. With a vectorization mode, ``None`` keeps the
                vector env's own.
            sessions: Serve up to this many clients at once, each with its own
                env made in its own worker process (default 1).
            prewarm: Keep this many session workers with a made env ready.
            **make_kwargs: The ``make`` binding.

        Raises:
            ParamError: the binding does not validate (nothing was built).
            ValueError: bad ``num_envs`` or ``vectorization_mode``.
            NotImplementedError: torch/jax with a Gymnasium vector fan-out.
        """
        from ..serve import serve_env  # lazy: serving sits above authoring

        if (
            sessions != 1 or prewarm
        ):  # issue 25 (passed only when asked for: the default call is unchanged)
            make_kwargs = {**make_kwargs, "sessions": sessions, "prewarm": prewarm}
        serve_env(  # seed 000: EnvFactory.serve forwards to rlmesh.serve.serve_env (CNF2-A8)
            self,
            address,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            framework=framework,
            device=device,
            workflow_edition=workflow_edition,
            autoreset=autoreset,
            **make_kwargs,
        )


# -- make wrapping and stamping (AUTH-2, DELTA-56/57) ---------------------------------------


def _stamping(make: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(make)
    def make_and_stamp(self: EnvFactory, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        branch = _branch_of(cls, make, self, args, kwargs) if cls.tag_params else None
        env = make(self, *args, **kwargs)
        if isinstance(env, (list, tuple)):
            for lane in env:
                _stamp(cls, lane, branch)
        else:
            _stamp(cls, env, branch)
        return env

    make_and_stamp.__rlmesh_stamped__ = True  # type: ignore[attr-defined]
    return make_and_stamp


def _branch_of(
    cls: type[EnvFactory], make: Callable[..., Any], self: Any, args: Any, kwargs: Any
) -> dict[str, Any]:
    """The discriminant values of one ``make`` call, defaults applied (DELTA-56)."""
    try:
        bound = inspect.signature(make).bind(self, *args, **kwargs)
    except TypeError:
        return {}  # make itself will raise the binding error
    bound.apply_defaults()
    spec = cls.params
    branch: dict[str, Any] = {}
    for name in cls.tag_params:
        value = bound.arguments.get(name)
        param = spec.get(name) if spec is not None else None
        choices = param.choices if param is not None and param.choices is not None else ()
        try:
            coerced = param.coerce(value) if param is not None else value
        except ParamError:
            coerced = value
        if not any(_same(coerced, c) for c in choices):
            raise ParamError(
                f"{cls.__qualname__}.make() got {name}={value!r}, which is not one of the contract "
                f"discriminant's choices {list(choices)!r}"
            )
        branch[name] = coerced
    return branch


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def _stamp(cls: type[EnvFactory], env: Any, branch: dict[str, Any] | None) -> None:
    tags = cls.tags_for(**branch) if branch else cls.tags
    if tags is not None:
        tag(env, tags, validate=False)  # validation is deferred to resolve/serve time (AUTH-2)
    updates: dict[str, Any] = {}
    if branch:
        updates[ENV_BRANCH_METADATA_KEY] = json_safe(branch)
    if cls.reset_options:
        updates[ENV_RESET_OPTIONS_KEY] = list(cls.reset_options)
    if updates:
        merge_metadata(env, updates)
    if cls._bridge is not None and getattr(env, "_rlmesh_bridge", None) is None:
        try:
            env._rlmesh_bridge = cls._bridge  # DELTA-57: keep the factory's framework pin
        except Exception:
            pass


def merge_metadata(env: Any, updates: Mapping[str, Any]) -> None:
    """Replace ``env.metadata`` with a copy merged with ``updates`` (never mutating a shared dict).

    Raises:
        TypeError: the env's ``metadata`` cannot be assigned.
    """
    current = getattr(env, "metadata", None)
    merged = dict(current) if isinstance(current, Mapping) else {}
    merged.update(updates)
    try:
        env.metadata = merged
    except Exception as exc:
        raise TypeError(
            f"cannot stamp metadata onto {type(env).__name__}: assigning env.metadata failed "
            f"({exc}); make() must return an env whose metadata attribute is assignable"
        ) from exc


# -- contract branches (DELTA-56) -------------------------------------------------------------


def _defines(cls: type, name: str) -> bool:
    return any(name in k.__dict__ for k in cls.__mro__ if k is not EnvFactory and k is not object)


def contract_branches(cls: type[EnvFactory]) -> list[dict[str, Any]]:
    """Every discriminant binding of a ``tag_params`` factory, default branch first."""
    spec = cls.params
    assert spec is not None
    sig = inspect.signature(cls.make)
    default = {n: spec.get(n).coerce(sig.parameters[n].default) for n in cls.tag_params}  # type: ignore[union-attr]
    combos = itertools.product(*(spec.get(n).choices or () for n in cls.tag_params))  # type: ignore[union-attr]
    rest = [dict(zip(cls.tag_params, c, strict=True)) for c in combos]
    return [default, *(b for b in rest if not all(_same(b[k], default[k]) for k in b))]


def _check_branches(cls: type[EnvFactory]) -> None:
    """Class-creation checks for ``tag_params``/``tags_for`` (DELTA-56), all ``TypeError``."""
    name = cls.__qualname__
    if not cls.tag_params:
        if _defines(cls, "tags_for"):
            raise TypeError(
                f"{name} overrides tags_for() but declares no tag_params; list the Params that "
                "select the contract, e.g. tag_params = ('mode',)"
            )
        return
    make = getattr(cls, "make", None)
    if make is None or getattr(make, "__isabstractmethod__", False):
        return  # checked on the concrete subclass
    spec = cls.params
    sig = inspect.signature(make)
    count = 1
    for p in cls.tag_params:
        declared = spec.get(p) if spec is not None else None
        if declared is None:
            raise TypeError(
                f"{name}.tag_params names {p!r}, which is not a declared Param in {name}.params"
            )
        if not declared.choices:
            raise TypeError(
                f"{name}.tag_params: Param {p!r} needs choices=(...) (one per contract branch)"
            )
        sp = sig.parameters.get(p)
        if sp is None or sp.default is inspect.Parameter.empty:
            raise TypeError(
                f"{name}.make() must give tag param {p!r} a default (the default contract branch)"
            )
        try:
            declared.coerce(sp.default)
        except ParamError:
            raise TypeError(
                f"{name}.make() default {p}={sp.default!r} is not one of its choices {list(declared.choices)!r}"
            ) from None
        count *= len(declared.choices)
    if count > MAX_CONTRACT_BRANCHES:
        raise TypeError(
            f"{name}.tag_params span {count} contract branches; at most {MAX_CONTRACT_BRANCHES} are allowed"
        )
    results = []
    for branch in contract_branches(cls):
        tags = cls.tags_for(**branch)
        if tags is not None and not isinstance(tags, EnvTags):
            raise TypeError(
                f"{name}.tags_for({branch}) returned {type(tags).__name__}; expected EnvTags or None"
            )
        results.append(tags)
    if len({r is None for r in results}) > 1:
        raise TypeError(
            f"{name}.tags_for() mixes EnvTags and None across branches; tag every branch or none"
        )
    if cls.tags is None:
        cls.tags = results[0]
    elif cls.tags != results[0]:
        raise TypeError(
            f"{name}.tags differ from tags_for() of the default branch {contract_branches(cls)[0]}; "
            "drop the tags attribute or make them agree"
        )


# -- building ---------------------------------------------------------------------------------


def framework_name(bridge: Any) -> str | None:
    if bridge is None or isinstance(bridge, str):
        return bridge
    name = getattr(bridge, "name", None)
    return name if isinstance(name, str) else None


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass


def build_env(
    factory: EnvFactory | type[EnvFactory],
    make_kwargs: Mapping[str, Any] | None = None,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    autoreset: str | None = None,
) -> tuple[EnvFactory, Any]:
    """Instantiate-if-needed, validate, ``prepare()`` and ``make()`` (AUTH-3, AUTH-5, DELTA-25).

    The binding is validated against ``params`` before ``prepare()`` so a bad
    value fails before anything heavy runs. The resolved binding is stamped
    under ``rlmesh.params.v1.binding`` in each env's metadata.

    Returns:
        ``(factory_instance, env)`` where env is one env (``num_envs == 1``), a
        :class:`rlmesh.serve.Lanes` list of ``num_envs`` lane envs (no
        vectorization mode; ``autoreset``, default NEXT_STEP), or a Gymnasium
        vector env (``"sync"``/``"async"``; ``autoreset`` sets its mode). The caller owns both; call
        ``factory.close()`` when done.

    Raises:
        ParamError: the binding does not validate.
        ValueError: bad ``num_envs`` or ``vectorization_mode``.
    """
    instance = factory() if isinstance(factory, type) else factory
    if not isinstance(instance, EnvFactory):
        raise TypeError(
            f"expected an EnvFactory subclass or instance, got {type(instance).__name__}"
        )
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if vectorization_mode not in _VECTORIZATION_MODES:
        raise ValueError(
            f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}"
        )
    mode = None if autoreset is None else autoreset_name(autoreset)
    cls = type(instance)
    binding = dict(make_kwargs or {})
    resolved = resolve_params(
        cls.params, instance.make, binding, where=f"{cls.__qualname__}.make()"
    )
    instance.prepare()
    stamp = binding_metadata(cls.params, instance.make, resolved)
    if vectorization_mode is not None:
        try:
            import gymnasium
        except ImportError as exc:
            raise DependencyMissing(
                'vectorization_mode needs Gymnasium; pip install gymnasium (the "gymnasium" extra of rlmesh-py)',
                name="gymnasium",
            ) from exc
        thunks: list[Any] = [functools.partial(instance.make, **resolved) for _ in range(num_envs)]
        vec_cls = (
            gymnasium.vector.SyncVectorEnv
            if vectorization_mode == "sync"
            else gymnasium.vector.AsyncVectorEnv
        )
        env: Any = (
            vec_cls(thunks)
            if mode is None
            else vec_cls(thunks, autoreset_mode=gymnasium.vector.AutoresetMode(mode))
        )
        merge_metadata(env, stamp)
        return instance, env
    envs = []
    try:
        for _ in range(num_envs):
            e = instance.make(**resolved)
            merge_metadata(e, stamp)
            envs.append(e)
    except BaseException:
        for e in envs:
            _close_quietly(e)
        raise
    return instance, envs[0] if num_envs == 1 else Lanes(envs, mode or Autoreset.NEXT_STEP)
