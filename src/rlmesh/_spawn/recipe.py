"""How an env is built in another process: one picklable recipe, one builder.

Every part of rlmesh that builds envs somewhere else -- a session worker of
``EnvServer(target, sessions=N)``, a worker of ``rlmesh.run(..., workers=N)``, an actor of
``rlmesh.ray.EnvFleet``, a sandbox's bootstrap -- describes the env with one
:class:`EnvRecipe` and builds it with :meth:`EnvRecipe.build`, so they all accept the same
sources and build them the same way. A source is, in this order (the seeds' precedence,
EVAL-6):

1. a string: ``"module:attr"`` or ``"path/file.py:attr"`` naming one of the forms below,
   or a Gymnasium id (``gymnasium.make``, or ``make_vec`` with a vectorization mode);
2. a live env (anything with ``reset`` and ``step``, not a class): served as it is;
3. an env factory, "anything with a make callable" (seed ``types.SupportsMake``): an
   :class:`~rlmesh.EnvFactory` (class or instance: params validated, ``prepare()``, tags),
   or any other class or object with ``make`` (instantiated if a class, ``prepare()`` when
   it has one, ``make(**make_kwargs)``; a Gymnasium ``EnvSpec`` is one);
4. an env class or a make callable: called with ``make_kwargs``.

``num_envs > 1`` builds that many envs served as the lanes of one endpoint
(:class:`~rlmesh.serve.Lanes`, autoresetting as ``autoreset`` says, NEXT_STEP by
default like ``gymnasium.make_vec``), or one Gymnasium vector env with a
``vectorization_mode``. The recipe travels by value (:mod:`rlmesh._spawn.pickling`):
what a script defines works in the worker too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._autoreset import Autoreset
from .._envkit.classify import Lanes
from .._gymid import ensure_registered, make_gym_env
from .._target import load_target, split_target
from ..authoring import EnvFactory, build_env

__all__ = [
    "RESERVED_ENV_KWARGS",
    "Built",
    "EnvRecipe",
    "close_quietly",
    "import_packages",
    "is_env_factory",
    "is_gymnasium_id",
    "is_live_env",
    "load_env_target",
    "resolve_target",
]

#: Keys a make binding may not carry: they are serving options (``--num-envs`` ...).
RESERVED_ENV_KWARGS = ("num_envs", "vectorization_mode", "framework", "device", "workflow_edition")


def import_packages(packages: Iterable[str]) -> None:
    """Import modules first so their envs self-register (CLI-1 ``--package``)."""
    for name in packages:
        importlib.import_module(name)


def resolve_target(target: str) -> Any:
    """``module:attr`` or ``file.py:attr`` -> the object; anything else (or a miss) -> ``None``.

    ``None`` means the string is a Gymnasium id (``"CartPole-v1"``, or Gymnasium's own
    ``"module:EnvId"`` form when no such Python module exists).
    """
    try:
        module_name, _ = split_target(target)
    except ValueError:
        return None
    try:
        return load_target(target)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None  # not a module: maybe a Gymnasium "module:EnvId"
        raise
    except AttributeError:
        return None


def is_gymnasium_id(source: Any) -> bool:
    """Whether ``source`` is a string that names no Python object (a Gymnasium id)."""
    return isinstance(source, str) and resolve_target(source) is None


def is_live_env(obj: Any) -> bool:
    """An env instance (``reset`` and ``step``, not a class) or a list of lane envs."""
    if isinstance(obj, (list, tuple)):
        return True
    return (
        not isinstance(obj, (str, type))
        and callable(getattr(obj, "reset", None))
        and callable(getattr(obj, "step", None))
    )


def is_env_factory(obj: Any) -> bool:
    """An :class:`~rlmesh.EnvFactory` subclass or instance."""
    return isinstance(obj, EnvFactory) or (isinstance(obj, type) and issubclass(obj, EnvFactory))


def close_quietly(*things: Any) -> None:
    """``close()`` each env (every lane of a list), then each factory; errors are swallowed."""
    for thing in things:
        for item in thing if isinstance(thing, list) else [thing]:
            close = getattr(item, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    pass


class Built(NamedTuple):
    """What :meth:`EnvRecipe.build` made: the env, what to close after it, the tags to publish."""

    #: One env, :class:`~rlmesh.serve.Lanes` of lane envs, or a Gymnasium vector env.
    env: Any
    #: The factory the env came from (closed after the env), or ``None``.
    factory: Any
    #: Env tags to publish with the contract (``None``: what the env's metadata carries).
    tags: Any = None

    def close(self) -> None:
        """Close the env (every lane), then its factory; errors are swallowed."""
        close_quietly(self.env, self.factory)


@dataclass(frozen=True)
class EnvRecipe:
    """How to build an env in another process (see the module docstring for the sources).

    Attributes:
        source: What the env is built from.
        make_kwargs: The make binding (``gym.make`` kwargs, factory params, callable kwargs).
        num_envs: Envs to build; more than one are lanes (or one Gymnasium vector env).
        vectorization_mode: ``None`` (lanes), ``"sync"`` or ``"async"`` (a Gymnasium vector env).
        autoreset: The lanes' autoreset mode (any :meth:`Autoreset.parse` spelling; ``None``:
            NEXT_STEP for lanes, the vector env's own with a vectorization mode).
        packages: Modules to import first, so their envs register (``--package``).
        tags: Env tags to publish (``None``: an ``EnvFactory``'s own, else the env's).

    Example:
        >>> built = EnvRecipe("CartPole-v1").build()
        >>> built.env.spec.id, built.factory
        ('CartPole-v1', None)
        >>> built.close()
    """

    source: Any
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)
    num_envs: int = 1
    vectorization_mode: str | None = None
    autoreset: str | None = None
    packages: Sequence[str] = ()
    tags: Any = None

    @property
    def label(self) -> str:
        """A short name of the source, for logs and a journal's run identity."""
        src = self.source
        if isinstance(src, str):
            return src
        named = src if isinstance(src, type) or callable(src) else type(src)
        return str(getattr(named, "__qualname__", None) or type(src).__qualname__)

    def build(self) -> Built:
        """Build the env (run in the worker); the caller closes it with :meth:`Built.close`.

        Raises:
            ValueError: bad counts or modes, a reserved key in the binding, kwargs for a live env.
            TypeError: a source of no accepted form.
            ParamError: an ``EnvFactory`` binding that does not validate (nothing built).
        """
        src = self.source
        if isinstance(src, str):
            env, factory = load_env_target(
                src,
                num_envs=self.num_envs,
                vectorization_mode=self.vectorization_mode,
                kwargs=self.make_kwargs,
                packages=self.packages,
                autoreset=self.autoreset,
            )
            return Built(env, factory, self.tags)
        import_packages(self.packages)
        env, factory = build_source(
            src,
            self.make_kwargs,
            num_envs=self.num_envs,
            vectorization_mode=self.vectorization_mode,
            autoreset=self.autoreset,
        )
        tags = self.tags
        if tags is None and is_env_factory(src) and self.vectorization_mode is None:
            cls: Any = src if isinstance(src, type) else type(src)
            tags = None if cls.tag_params else cls.tags
        return Built(env, factory, tags)


def load_env_target(
    target: str,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    packages: Sequence[str] = (),
    autoreset: str | None = None,
) -> tuple[Any, Any]:
    """Build what ``EnvServer`` should serve for a target string: ``(env_or_lanes, factory)``.

    ``target`` is ``module:attr`` / ``file.py:attr`` (any source form of the module
    docstring) or a Gymnasium id. ``num_envs > 1`` with no ``vectorization_mode`` builds
    ``num_envs`` envs served as lanes; ``"sync"``/``"async"`` one Gymnasium vector env
    (DELTA-23). ``autoreset`` picks how the lanes autoreset (``None``: NEXT_STEP, like
    ``gymnasium.make_vec``).

    Raises:
        ValueError: bad counts/modes, or reserved keys in ``kwargs``.
        ParamError: a factory binding that does not validate (nothing built).
    """
    import_packages(packages)
    kwargs = dict(kwargs or {})
    bad = [k for k in RESERVED_ENV_KWARGS if k in kwargs]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is a serving option, not an env parameter; pass it as --{bad[0].replace('_', '-')}"
        )
    _check_counts(num_envs, vectorization_mode, autoreset)
    obj = resolve_target(target)
    if obj is not None:
        return build_source(
            obj,
            kwargs,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            autoreset=autoreset,
            what=target,
        )
    # a Gymnasium id: the package that registers it is found and imported first (_gymid)
    mode = None if autoreset is None else Autoreset.parse(autoreset)
    if num_envs == 1:
        return make_gym_env(target, **kwargs), None
    if vectorization_mode is None:
        lanes = [make_gym_env(target, **kwargs) for _ in range(num_envs)]
        return Lanes(lanes, mode or Autoreset.NEXT_STEP), None
    import gymnasium as gym

    vector_kwargs = {} if mode is None else {"autoreset_mode": gym.vector.AutoresetMode(mode.value)}
    return gym.make_vec(
        ensure_registered(target),
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        vector_kwargs=vector_kwargs,
        **kwargs,
    ), None


def _check_counts(num_envs: Any, vectorization_mode: Any, autoreset: Any) -> None:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(
            f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}"
        )
    mode = None if autoreset is None else Autoreset.parse(autoreset)
    if mode is not None and num_envs == 1 and mode != Autoreset.DISABLED:
        raise ValueError(
            "--autoreset applies to several lanes (--num-envs N > 1); a single env never autoresets"
        )


def build_source(
    source: Any,
    kwargs: Mapping[str, Any],
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    autoreset: str | None = None,
    what: str = "",
) -> tuple[Any, Any]:
    """Build an object source (forms 2-4 of the module docstring): ``(env_or_lanes, factory)``.

    Raises:
        ValueError: kwargs or lanes for a live env; bad counts or modes.
        TypeError: an object of no accepted form (``what`` names it, e.g. the target string).
    """
    name = what or type(source).__name__
    if is_env_factory(source):
        made, env = build_env(
            source,
            kwargs,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            autoreset=autoreset,
        )
        return env, made
    if is_live_env(source):
        if kwargs or num_envs != 1:
            raise ValueError(
                f"{name} is a live env (an instance); it takes no make kwargs and serves one env "
                "(pass its class or a make callable to build more)"
            )
        return source, None
    _check_counts(num_envs, vectorization_mode, autoreset)
    factory: Any = None
    make: Callable[..., Any]
    if callable(getattr(source, "make", None)):  # a duck factory: anything with make()
        factory = source() if isinstance(source, type) else source
        prepare = getattr(factory, "prepare", None)
        if callable(prepare):
            prepare()
        make = factory.make
    elif callable(source):
        make = source
    else:
        raise TypeError(
            f"{name} is a {type(source).__name__}, not an env source: pass a Gymnasium id, "
            "'module:attr', an EnvFactory, an object with make(), an env class or a make callable"
        )
    return _lanes_of(make, kwargs, num_envs, vectorization_mode, autoreset), factory


def _lanes_of(
    make: Callable[..., Any],
    kwargs: Mapping[str, Any],
    num_envs: int,
    vectorization_mode: str | None,
    autoreset: str | None,
) -> Any:
    """``make(**kwargs)`` once, or ``num_envs`` times as lanes / one Gymnasium vector env."""
    if num_envs == 1:
        return make(**kwargs)
    mode = None if autoreset is None else Autoreset.parse(autoreset)
    if vectorization_mode is None:
        envs: list[Any] = []
        try:
            for _ in range(num_envs):
                envs.append(make(**kwargs))
        except BaseException:
            close_quietly(envs)
            raise
        return Lanes(envs, mode or Autoreset.NEXT_STEP)  # like gymnasium.make_vec
    import gymnasium as gym

    thunks = [lambda: make(**kwargs) for _ in range(num_envs)]
    extra: dict[str, Any] = (
        {} if mode is None else {"autoreset_mode": gym.vector.AutoresetMode(mode.value)}
    )
    if vectorization_mode == "sync":
        return gym.vector.SyncVectorEnv(thunks, **extra)
    return gym.vector.AsyncVectorEnv(thunks, **extra)
