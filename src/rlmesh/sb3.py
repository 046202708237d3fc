"""Stable-Baselines3: many served endpoints as one SB3 ``VecEnv`` (needs the ``sb3`` extra).

:class:`RemoteVecEnv` is a real ``stable_baselines3.common.vec_env.VecEnv`` whose
``step_async`` / ``step_wait`` are the split stepping of a many-endpoint vector env: every
endpoint gets its lanes' actions first, then the replies are gathered, so the servers
step at the same time. No subprocess of its own::

    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor
    from rlmesh.sb3 import RemoteVecEnv

    env = VecMonitor(RemoteVecEnv(["127.0.0.1:5001", "127.0.0.1:5002"]))
    PPO("MlpPolicy", env).learn(20_000)

Importing this module imports Stable-Baselines3 (``import rlmesh`` never does); without
it, the import fails with an ``ImportError`` naming the ``sb3`` extra.

SB3's conventions hold: a lane that ends is reset in the same step, ``infos[i]`` then
carries ``terminal_observation`` and ``TimeLimit.truncated``, and ``reset_infos[i]`` the
reset's info. Endpoints may be scalar (reset here), vector endpoints served SAME_STEP
(``rlmesh serve ... --autoreset same-step``) or DISABLED (their ended lanes are reset
here, with a partial reset); a NEXT_STEP vector endpoint is refused (its lanes would
hand SB3 the autoreset step as a transition).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import DependencyMissing

try:
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise DependencyMissing(
        'rlmesh.sb3 needs Stable-Baselines3: pip install stable-baselines3 (the "sb3" extra of rlmesh-py)',
        name="stable_baselines3",
    ) from _exc

from ._autoreset import Autoreset
from .client._dial import dial_keywords
from .client._fanout import FanOut
from .client._lanes import lane_of
from .spaces._gym import to_gymnasium_space

__all__ = ["RemoteVecEnv"]


class RemoteVecEnv(VecEnv):
    """Served endpoints (scalar or vector, lanes in address order) as one SB3 ``VecEnv``.

    Args:
        addresses: Endpoint addresses (one string for a single endpoint).
        connect_timeout_seconds, request_timeout_seconds, workflow_edition: Per endpoint,
            as for :class:`rlmesh.numpy.RemoteEnv`.
        token, tls_ca: As for :class:`rlmesh.numpy.RemoteEnv`; one token for every endpoint.

    Raises:
        ValueError: endpoints whose spaces or autoreset modes differ, or a NEXT_STEP
            vector endpoint (serve it with ``--autoreset same-step``).

    A lost endpoint raises :class:`rlmesh.errors.EndpointLost` (its address and lanes);
    ``reconnect(index)`` then ``reset()``, or ``close()``.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [addresses]
        fan = FanOut(list(addresses), dial_keywords(locals()))
        if all(p.scalar for p in fan.parts):
            fan.mode = Autoreset.SAME_STEP.value  # scalar endpoints are reset here, in SB3's way
        elif fan.mode == Autoreset.NEXT_STEP:
            odd = next(p for p in fan.parts if not p.scalar)
            fan.close()
            raise ValueError(
                f"{odd.name()} autoresets NEXT_STEP, which SB3 cannot use (the autoreset step would look like a "
                "transition); serve it with `--autoreset same-step` (or Lanes(..., autoreset='same-step'))"
            )
        self._fan = fan
        first = fan.parts[0].client
        self._render_mode = first.render_mode
        super().__init__(
            fan.num_envs,
            to_gymnasium_space(first.observation_space_spec),
            to_gymnasium_space(first.action_space_spec),
        )
        self._actions: Any = None

    @property
    def addresses(self) -> list[str]:
        """The endpoint addresses, in lane order."""
        return self._fan.addresses

    # -- the VecEnv interface ---------------------------------------------------------------

    def reset(self) -> Any:
        """Reset every lane with the seeds / options set by ``seed()`` / ``set_options()``."""
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        options = [dict(o or {}) for o in self._options]
        if any(o != options[0] for o in options):
            raise ValueError("RemoteVecEnv.set_options takes one options dict for every lane")
        obs, info, _ = self._fan.reset(seeds, options[0] or None)
        n = self.num_envs
        self.reset_infos = [lane_of(info, i, n) for i in range(n)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray[Any, Any]) -> None:
        """Send every endpoint its lanes' actions (the split stepping's first half)."""
        self._fan.step_async(actions)

    def step_wait(
        self,
    ) -> tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any], list[dict[str, Any]]]:
        """Gather the replies: ``(obs, rewards, dones, infos)`` in SB3's conventions."""
        fan = self._fan
        obs, rewards, terms, truncs, info, _ = fan.step_wait()
        n = self.num_envs
        dones = terms | truncs
        lanes = [lane_of(info, i, n) for i in range(n)]
        infos: list[dict[str, Any]] = []
        ended = dones.nonzero()[0].tolist()
        if ended and fan.mode == Autoreset.DISABLED:  # reset the ended lanes here, where they own
            terminal = [_row(obs, i) for i in ended]
            obs, reset_info, _ = fan.reset(None, None, ended)
            for j, i in enumerate(ended):
                lanes[i] = {
                    "final_obs": terminal[j],
                    "final_info": lanes[i],
                    **lane_of(reset_info, i, n),
                }
        for i, lane in enumerate(lanes):
            if dones[i]:
                final = lane.pop("final_info", {}) or {}
                out = dict(final)
                out["terminal_observation"] = lane.pop("final_obs", None)
                self.reset_infos[i] = lane
            else:
                out = lane
            out["TimeLimit.truncated"] = bool(
                truncs[i] and not terms[i]
            )  # as DummyVecEnv, every step
            infos.append(out)
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Detach from every endpoint (their servers keep running)."""
        self._fan.close()

    def reconnect(self, endpoint: int | str) -> None:
        """Dial a lost endpoint again (index or address); ``reset()`` before stepping."""
        self._fan.reconnect(endpoint)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """Only what a remote env publishes: ``render_mode``, ``render_modes``, ``spec``."""
        n = len(self._indices(indices))
        if attr_name == "render_mode":
            return [self._render_mode] * n
        if attr_name == "render_modes":
            return [[self._render_mode] if self._render_mode else []] * n
        if attr_name == "spec":
            return [None] * n
        raise AttributeError(
            f"a remote env exposes no attribute {attr_name!r} (it lives in another process)"
        )

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise AttributeError(
            f"cannot set {attr_name!r} on a remote env; configure it where the env is served"
        )

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        """Only ``render`` (one frame per lane) reaches a remote env."""
        if method_name != "render":
            raise AttributeError(f"a remote env has no method {method_name!r} callable from here")
        lanes = self._indices(indices)
        frames = []
        for part in self._fan.parts:
            for g in part.lanes:
                if g in lanes:
                    frames.append(
                        part.client.render()
                        if part.scalar
                        else part.client.render(env_index=g - part.offset)
                    )
        return frames

    def get_images(self) -> Sequence[np.ndarray[Any, Any] | None]:
        return self.env_method("render")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: Any) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)


def _row(obs: Any, i: int) -> Any:
    if isinstance(obs, dict):
        return {k: _row(v, i) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_row(v, i) for v in obs)
    return np.array(obs[i], copy=True)
