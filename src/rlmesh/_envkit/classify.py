"""What an env object is: vector or scalar, its lanes, autoreset mode, id and metadata (SRV-3, AR-1, SRV-11)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .._autoreset import Autoreset
from .._contract import UNKNOWN_ENV_ID
from .._keys import AUTORESET_MODE_KEY, MAX_EPISODE_STEPS_KEY

__all__ = [
    "Lanes",
    "autoreset_mode_of",
    "autoreset_name",
    "declared_autoreset",
    "env_id_of",
    "is_vector_env",
    "published_metadata",
    "reset_takes_options",
    "spec_id",
    "subset_resets",
    "vector_lanes",
]

_MODES = {"NextStep": "NextStep", "SameStep": "SameStep", "Disabled": "Disabled"}


def autoreset_name(mode: Any) -> str:
    """``"NextStep"``/``"SameStep"``/``"Disabled"`` from any spelling :meth:`Autoreset.parse` reads."""
    return Autoreset.parse(mode).value


class Lanes(list[Any]):
    """Scalar envs to serve as the lanes of one endpoint, with an explicit autoreset mode.

    ``EnvServer(Lanes(envs, autoreset="disabled"), address)``; a plain list of envs
    autoresets NEXT_STEP, like ``gymnasium.make_vec``.
    """

    def __init__(self, envs: Sequence[Any], autoreset: Any = "next-step") -> None:
        super().__init__(envs)
        self.autoreset_mode = autoreset_name(autoreset)


def is_vector_env(env: Any) -> bool:
    """SRV-3: an env exposing num_envs / single_observation_space / single_action_space."""
    return any(
        _has(env, a) for a in ("num_envs", "single_observation_space", "single_action_space")
    )


def vector_lanes(env: Any) -> int | None:
    """``None`` for a scalar env, else the lane count of a vector env (SRV-3).

    Raises:
        ValueError: a vector env reporting fewer than one lane.
    """
    if not is_vector_env(env):
        return None
    try:
        n = int(getattr(env, "num_envs", 0) or 0)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ValueError(f"vector env reports num_envs={n}; it needs at least one lane")
    return n


def subset_resets(env: Any) -> bool:
    """AR-10: whether ``env`` resets chosen lanes: a Gymnasium (>= 1.1) ``VectorEnv`` taking ``options["reset_mask"]``."""
    vector = sys.modules.get(
        "gymnasium.vector"
    )  # not imported: env cannot be a Gymnasium VectorEnv
    if (
        vector is None
        or not hasattr(vector, "AutoresetMode")
        or not isinstance(env, vector.VectorEnv)
    ):
        return False
    return reset_takes_options(env)


def _has(env: Any, name: str) -> bool:
    try:
        inspect.getattr_static(env, name)
        return True
    except AttributeError:
        return False


def autoreset_mode_of(metadata: Any) -> str:
    """AR-1: the mode a metadata mapping declares; absent -> Disabled; unknown -> ValueError."""
    try:
        if metadata is None or AUTORESET_MODE_KEY not in metadata:
            return "Disabled"
        raw = metadata[AUTORESET_MODE_KEY]
    except TypeError:
        return "Disabled"
    if raw is None:
        raise ValueError(
            "metadata['autoreset_mode'] is None; use 'NextStep', 'SameStep' or 'Disabled'"
        )
    value = getattr(raw, "value", raw)
    if isinstance(value, str) and value in _MODES:
        return _MODES[value]
    raise ValueError(
        f"unknown metadata['autoreset_mode'] {raw!r}; expected gymnasium AutoresetMode or "
        "one of 'NextStep', 'SameStep', 'Disabled'"
    )


def declared_autoreset(metadata: Any, default: str = "NextStep") -> str:
    """AR-1 for a vector env: the declared mode, ``default`` when none is declared (gymnasium: NextStep).

    Raises:
        ValueError: the metadata declares an unknown mode (e.g. ``"Weird"``) or ``None``.
    """
    try:
        declared = metadata is not None and AUTORESET_MODE_KEY in metadata
    except TypeError:
        declared = False
    return autoreset_mode_of(metadata) if declared else default


def env_id_of(env: Any) -> str:
    """SRV-11: ``env.spec.id`` when it is a str, else ``"UnknownEnv-v1"``."""
    try:
        spec = env.spec
    except Exception:
        return UNKNOWN_ENV_ID
    return spec_id(spec)


def spec_id(spec: Any) -> str:
    """SRV-11: ``spec.id`` when it is a non-empty str, else ``"UnknownEnv-v1"``."""
    ident = getattr(spec, "id", None) if spec is not None else None
    return ident if isinstance(ident, str) and ident else UNKNOWN_ENV_ID


def published_metadata(env: Any) -> Any:
    """``env.metadata``, plus ``max_episode_steps`` from ``env.spec`` when it is known and not declared.

    Clients learn the episode limit from it (``rlmesh.gymnasium``'s ``spec.max_episode_steps``).
    The env's own mapping is never mutated.
    """
    md = getattr(env, "metadata", None)
    try:
        limit = getattr(getattr(env, "spec", None), MAX_EPISODE_STEPS_KEY, None)
    except Exception:
        return md
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return md
    if md is None:
        return {MAX_EPISODE_STEPS_KEY: limit}
    if not isinstance(md, Mapping) or MAX_EPISODE_STEPS_KEY in md:
        return md
    return {**md, MAX_EPISODE_STEPS_KEY: limit}


def reset_takes_options(env: Any) -> bool:
    """Whether ``env.reset`` takes ``options`` (a parameter so named, or ``**kwargs``)."""
    try:
        params = inspect.signature(env.reset).parameters
    except (TypeError, ValueError):
        return True
    return "options" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
