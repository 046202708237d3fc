"""What serving a target needs beyond the servers: env targets (``module:attr``, a file
target or a Gymnasium id) built into what ``EnvServer`` serves, and the startup marks.

The command lines that use these (``rlmesh serve``, ``rlmesh serve-model``,
``python -m rlmesh.serve``) live in :mod:`rlmesh._cli`; the session pool's workers, Ray
actors and the sandbox bootstrap build their envs here too.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._autoreset import Autoreset
from .._envkit.classify import Lanes, autoreset_name
from .._gymid import ensure_registered, make_gym_env
from .._target import load_target, split_target
from ..authoring import EnvFactory, build_env

__all__ = [
    "import_packages",
    "load_env_target",
    "mark_startup",
    "startup_marks",
    "startup_text",
]

_T0 = time.monotonic()
_MARKS: dict[str, float] = {}
_RESERVED_KWARGS = ("num_envs", "vectorization_mode", "framework", "device", "workflow_edition")


def mark_startup(phase: str) -> None:
    """Record that startup ``phase`` (``imports``, ``env``, ``model``, ``listen``) ended now."""
    _MARKS[phase] = time.monotonic()


def _process_age_seconds() -> float | None:
    """Seconds since this process started, from /proc (None where unreadable)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def startup_marks() -> dict[str, str]:
    """``rlmesh.startup.<phase>_ms`` strings measured from process start (DELTA-12)."""
    age = _process_age_seconds()
    base = time.monotonic() - age if age is not None else _T0
    out = {f"rlmesh.startup.{k}_ms": f"{(v - base) * 1e3:.1f}" for k, v in _MARKS.items()}
    if age is not None:
        out["rlmesh.startup.process_ms"] = f"{(_T0 - base) * 1e3:.1f}"
    return out


def startup_text() -> str:
    """`` (startup: process 0.1s, imports 0.4s, ...)`` for the serving line, or ``""``."""
    marks = startup_marks()
    parts = []
    for phase in ("process", "imports", "env", "model", "listen"):
        v = marks.get(f"rlmesh.startup.{phase}_ms")
        if v is not None:
            parts.append(f"{phase} {float(v) / 1e3:.1f}s")
    return f" (startup: {', '.join(parts)})" if parts else ""


def import_packages(packages: Sequence[str]) -> None:
    """Import modules first so their envs self-register (CLI-1 ``--package``)."""
    for name in packages:
        importlib.import_module(name)


def _resolve(target: str) -> Any:
    """``module:attr`` or ``file.py:attr`` -> the object; anything else (or a miss) -> ``None`` (a Gymnasium id)."""
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


def load_env_target(
    target: str,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    packages: Sequence[str] = (),
    autoreset: str | None = None,
) -> tuple[Any, Any]:
    """Build what ``EnvServer`` should serve for ``target``; returns ``(env_or_lanes, factory)``.

    ``num_envs > 1`` with no ``vectorization_mode`` builds ``num_envs`` envs served
    as lanes; ``"sync"``/``"async"`` builds a Gymnasium vector env (DELTA-23).
    ``autoreset`` (``"next-step"``, ``"same-step"``, ``"disabled"``) picks how the
    lanes autoreset; ``None`` is NEXT_STEP, like ``gymnasium.make_vec``.

    Raises:
        ValueError: bad counts/modes, or reserved keys in ``kwargs``.
        ParamError: a factory binding that does not validate (nothing built).
    """
    import_packages(packages)
    kwargs = dict(kwargs or {})
    bad = [k for k in _RESERVED_KWARGS if k in kwargs]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is a serving option, not an env parameter; pass it as --{bad[0].replace('_', '-')}"
        )
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(
            f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}"
        )
    mode = None if autoreset is None else autoreset_name(autoreset)
    if mode is not None and num_envs == 1 and mode != Autoreset.DISABLED:
        raise ValueError(
            "--autoreset applies to several lanes (--num-envs N > 1); a single env never autoresets"
        )
    obj = _resolve(target)
    if isinstance(obj, EnvFactory) or (isinstance(obj, type) and issubclass(obj, EnvFactory)):
        factory, env = build_env(
            obj,
            kwargs,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            autoreset=autoreset,
        )
        return env, factory
    vector_kwargs = {} if mode is None else {"autoreset_mode": _gym_autoreset(mode)}
    if obj is None:  # a Gymnasium id: its registering package is found and imported first
        if num_envs == 1:
            return make_gym_env(target, **kwargs), None
        if vectorization_mode is None:
            return Lanes(
                [make_gym_env(target, **kwargs) for _ in range(num_envs)],
                mode or Autoreset.NEXT_STEP,
            ), None
        import gymnasium as gym

        return gym.make_vec(
            ensure_registered(target),
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            vector_kwargs=vector_kwargs,
            **kwargs,
        ), None
    if (
        callable(getattr(obj, "reset", None))
        and callable(getattr(obj, "step", None))
        and not isinstance(obj, type)
    ):
        if kwargs or num_envs != 1:
            raise ValueError(f"{target} is an env instance; it takes no kwargs and serves one env")
        return obj, None
    if not callable(obj):
        raise TypeError(
            f"{target} is a {type(obj).__name__}, not an env, an env factory or a callable"
        )
    if num_envs == 1:
        return obj(**kwargs), None
    if vectorization_mode is None:
        return Lanes([obj(**kwargs) for _ in range(num_envs)], mode or Autoreset.NEXT_STEP), None
    import gymnasium as gym

    thunks = [lambda: obj(**kwargs) for _ in range(num_envs)]
    vec_cls = (
        gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
    )
    return vec_cls(thunks, **vector_kwargs), None


def _gym_autoreset(mode: str) -> Any:
    """The ``gymnasium.vector.AutoresetMode`` of a wire mode name."""
    from gymnasium.vector import AutoresetMode

    return AutoresetMode(mode)


def _close_all(env: Any) -> None:
    for e in env if isinstance(env, list) else [env]:
        try:
            e.close()
        except Exception:
            pass
