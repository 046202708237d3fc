"""RemoteVectorEnv: a served lane endpoint, or many endpoints, as a real Gymnasium ``VectorEnv``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlmesh.client._dial import dial_keywords
from rlmesh.client._fanout import FanOut, FanOutHandle
from rlmesh.spaces._gym import to_gymnasium_space

from ._info import _arrayify, _as_space_value, _reset_mask
from ._shared import (
    _MODES,
    _SINGLE_ENV,
    _WARNING_KEY,
    _connect,
    _Handle,
    _one_env_endpoint,
    _Shared,
    _spec_of,
    _VectorClient,
    log,
)


class RemoteVectorEnv(_Handle, VectorEnv):
    """A served vector/lane endpoint as a real :class:`gymnasium.vector.VectorEnv`.

    ``RemoteVectorEnv([addr0, addr1, ...])`` (a list) is one vector env over many
    endpoints (scalar or vector, lanes in address order), stepped by sending to all,
    then gathering; see :class:`_ManyEndpoints` and docs/scaling.md.

    ``observation_space``/``action_space`` are batched; ``single_*`` describe one lane;
    ``metadata["autoreset_mode"]`` is the endpoint's :class:`~gymnasium.vector.AutoresetMode`.
    ``reset(options={"reset_mask": mask})`` resets only the masked lanes (DISABLED and
    SAME_STEP endpoints). Same keywords as :class:`RemoteEnv`; ``num_envs``, when given
    (``gymnasium.make_vec`` passes it), must match the endpoint.
    """

    def __new__(cls, address: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A list (or tuple) of addresses makes one vector env over many endpoints (issue 26)."""
        if isinstance(address, (list, tuple)) and not issubclass(cls, _ManyEndpoints):
            return object.__new__(_ManyEndpoints)
        return object.__new__(cls)

    def __init__(
        self,
        address: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        episode_info: bool = False,
        num_envs: int | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        kwargs = dial_keywords(locals())
        try:
            self._shared: _Shared | None = _connect(_VectorClient, address, kwargs)
        except ValueError as exc:
            if num_envs is None or _SINGLE_ENV not in str(exc):
                raise
            raise ValueError(_one_env_endpoint(str(exc), num_envs)) from None
        self._client = self._shared.client
        if num_envs is not None and num_envs != self._client.num_envs:
            self.close_extras()
            raise ValueError(
                f"the endpoint at '{self._client.address}' serves {self._client.num_envs} lanes, not {num_envs}; "
                "the lane count is chosen where the env is served (rlmesh serve --num-envs N)"
            )
        self._describe(
            self._client, int(self._client.num_envs), self._client.autoreset_mode, episode_info
        )
        self.spec = _spec_of(self._client, vector=True, kwargs={"address": self._client.address})

    def _describe(self, first: Any, num_envs: int, mode: str, episode_info: bool) -> None:
        """Spaces, autoreset mode and metadata from ``first`` (the client of lane 0) and the lane count."""
        self._episode_info = bool(episode_info)
        self.num_envs = num_envs
        self.single_observation_space = to_gymnasium_space(first.observation_space_spec)
        self.single_action_space = to_gymnasium_space(first.action_space_spec)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.autoreset_mode = _MODES[mode]
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        # as on RemoteEnv: the modes this handle renders (the served one); the env's own
        # list stays on the numpy client (`envs.client.metadata["render_modes"]`)
        self.metadata["render_modes"] = [self.render_mode] if self.render_mode else []

    @property
    def client(self) -> Any:
        """The underlying :class:`rlmesh.numpy.RemoteVectorEnv` connection."""
        return self._client

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane (``seed + i`` seeds lane ``i``), or the lanes of ``options["reset_mask"]``."""
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            VectorEnv.reset(self, seed=int(seed))
        opts, indices = _reset_mask(options, self.num_envs)
        return self._reset_lanes(seed, opts, indices)

    def _reset_lanes(
        self, seed: Any, opts: dict[str, Any] | None, indices: list[int] | None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the endpoint's lanes (``indices``: the masked ones; ``None``: all)."""
        if indices is not None and len(indices) == self.num_envs:
            indices = None
        if (
            indices is not None
            and isinstance(seed, (int, np.integer))
            and not isinstance(seed, bool)
        ):
            seed = [int(seed) + i for i in indices]
        elif indices is not None and seed is not None and len(seed) == self.num_envs:
            seed = [seed[i] for i in indices]  # Gymnasium's per-lane list
        self._client.runtime = {}
        obs, info = self._client.reset(seed=seed, options=opts, env_indices=indices)
        return obs, self._vector_info(info, None, None)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every lane: batched ``(obs, rewards, terminations, truncations, info)``."""
        self._client.runtime = {}
        return self._batched(*self._client.step(actions))  # the client's straight step road

    def step_async(self, actions: Any) -> None:
        """Send one step of every lane and return at once; :meth:`step_wait` returns its result."""
        self._client.step_async(actions)

    def step_wait(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The result of the step :meth:`step_async` sent (``NoAsyncCallError`` if none)."""
        self._client.runtime = {}
        return self._batched(*self._client.step_wait())

    def _batched(
        self, obs: Any, rewards: Any, terminations: Any, truncations: Any, info: dict[str, Any]
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        terminations = np.array(terminations, dtype=bool)
        truncations = np.array(truncations, dtype=bool)
        done = terminations | truncations
        return (
            obs,
            np.array(rewards, dtype=np.float64),
            terminations,
            truncations,
            self._vector_info(info, obs, done),
        )

    def render(self) -> tuple[Any, ...] | None:
        """One frame per lane (a tuple, like ``SyncVectorEnv``), or ``None`` when nothing renders."""
        if self.render_mode is None:
            return None
        return tuple(self._client.render(env_index=i) for i in range(self.num_envs))

    def __enter__(self) -> RemoteVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close_extras(self, **kwargs: Any) -> None:
        """Detach from the endpoint (the server keeps running). Idempotent."""
        shared, self._shared = getattr(self, "_shared", None), None
        if shared is not None:
            shared.release()

    def __repr__(self) -> str:
        return f"<RemoteVectorEnv address='{getattr(getattr(self, '_client', None), 'address', '?')}' num_envs={self.num_envs}>"

    # -- info conversion --------------------------------------------------------------------

    def _vector_info(self, info: dict[str, Any], obs: Any, done: Any) -> dict[str, Any]:
        """The served info in Gymnasium's vector conventions (arrays of ``num_envs`` with ``_key`` masks)."""
        warnings = info.pop(_WARNING_KEY, None)
        runtime = self._client.runtime
        n = self.num_envs
        lanes = info.get("final_info")
        out: dict[str, Any] = {}
        if isinstance(lanes, list) and len(lanes) == n and "_final_info" in info:
            # A lane endpoint: one plain info per lane (plus final_obs/reset_info under SAME_STEP).
            same_step = self.autoreset_mode == AutoresetMode.SAME_STEP and done is not None
            final_obs = info.get("final_obs") if same_step else None
            reset_infos = info.get("reset_info") if same_step else None
            for i, lane in enumerate(lanes):
                own = dict(lane) if isinstance(lane, Mapping) else {}
                if same_step and done[i]:
                    ended = (
                        final_obs[i] if isinstance(final_obs, list) and i < len(final_obs) else None
                    )
                    out = self._add_info(
                        out,
                        {
                            "final_obs": _as_space_value(self.single_observation_space, ended),
                            "final_info": own,
                        },
                        i,
                    )
                    nxt = (
                        reset_infos[i]
                        if isinstance(reset_infos, list) and i < len(reset_infos)
                        else None
                    )
                    own = dict(nxt) if isinstance(nxt, Mapping) else {}
                if own:
                    out = self._add_info(out, own, i)
        else:
            out = _arrayify(info, n, self.single_observation_space)
        if self._episode_info:
            if warnings:
                out[_WARNING_KEY] = warnings
            _add_runtime_keys(out, runtime, n)
        elif warnings:
            log.warning("rlmesh conformance warning from the env: %s", warnings)
        return out


class _ManyEndpoints(FanOutHandle, RemoteVectorEnv):
    """``rlmesh.gymnasium.RemoteVectorEnv([addr0, addr1, ...])``: many endpoints, one vector env.

    Each endpoint may be scalar (one lane) or vector; lanes are concatenated in address
    order. ``step`` sends every endpoint its lanes' actions, then gathers (``step_async``
    / ``step_wait`` are the two halves). Spaces and autoreset modes must agree across
    endpoints (``ValueError`` naming the endpoint that differs); scalar endpoints are
    reset here in the common mode (NEXT_STEP when all are scalar, or ``autoreset_mode=``),
    exactly as :class:`gymnasium.vector.SyncVectorEnv` resets its sub-envs.
    ``reset(seed=s)`` seeds lane ``i`` with ``s + i``; ``options={"reset_mask": mask}``
    resets only the masked lanes, each on the endpoint owning it. ``info`` follows
    Gymnasium's layout (``_key`` masks, ``final_obs``/``final_info``).

    An endpoint that goes away raises :class:`rlmesh.errors.EndpointLost` (``address``,
    ``index``, ``lanes``) once every other reply was read; the others stay connected.
    Then ``reconnect(err.index)`` and ``reset()`` (or a ``reset_mask`` of ``err.lanes``),
    or ``close()``.
    """

    def __init__(
        self,
        address: Sequence[str],
        *,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        episode_info: bool = False,
        num_envs: int | None = None,
        autoreset_mode: Any = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        self._shared = None
        self._fan = FanOut(list(address), dial_keywords(locals()), autoreset_mode)
        first = self._fan.parts[0].client
        if num_envs is not None and num_envs != self._fan.num_envs:
            self._fan.close()
            raise ValueError(
                f"the endpoints {self._fan.addresses} serve {self._fan.num_envs} lanes in all, not {num_envs}"
            )
        self._describe(first, self._fan.num_envs, self._fan.mode, episode_info)
        self.spec = _spec_of(first, vector=True, kwargs={"address": self._fan.addresses})

    @property
    def address(self) -> str:
        """The endpoint addresses, comma-separated."""
        return ", ".join(self._fan.addresses)

    @property
    def client(self) -> Any:
        """The fan-out engine (``rlmesh.client._fanout.FanOut``) holding one client per endpoint."""
        return self._fan

    def _reset_lanes(
        self, seed: Any, opts: dict[str, Any] | None, indices: list[int] | None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the lanes on the endpoints owning them (``indices``: the masked ones; ``None``: all)."""
        obs, info, runtime = self._fan.reset(seed, opts, indices)
        return obs, self._runtime_info(info, runtime, reset=True)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every lane on every endpoint: batched ``(obs, rewards, terminations, truncations, info)``."""
        self._fan.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Send every endpoint its lanes' actions and return at once."""
        self._fan.step_async(actions)

    def step_wait(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Gather every endpoint's reply (``NoAsyncCallError`` when nothing was sent)."""
        obs, rewards, terms, truncs, info, runtime = self._fan.step_wait()
        return obs, rewards, terms, truncs, self._runtime_info(info, runtime, reset=False)

    def render(self) -> tuple[Any, ...] | None:
        """One frame per lane (a tuple, like ``SyncVectorEnv``), or ``None`` when nothing renders."""
        if self.render_mode is None:
            return None
        frames = []
        for part in self._fan.parts:
            client = part.client
            frames.extend(
                [client.render()]
                if part.scalar
                else [client.render(env_index=i) for i in range(part.n)]
            )
        return tuple(frames)

    def close_extras(self, **kwargs: Any) -> None:
        """Detach from every endpoint (their servers keep running). Idempotent."""
        fan = getattr(self, "_fan", None)
        if fan is not None:
            fan.close()

    def __repr__(self) -> str:
        return f"<RemoteVectorEnv addresses={getattr(self, 'addresses', '?')} num_envs={getattr(self, 'num_envs', '?')}>"

    def _runtime_info(
        self, info: dict[str, Any], runtime: dict[str, Any], *, reset: bool
    ) -> dict[str, Any]:
        if self._episode_info:
            _add_runtime_keys(info, runtime, self.num_envs, completed=not reset)
        return info


def _add_runtime_keys(
    info: dict[str, Any], runtime: Mapping[str, Any], n: int, *, completed: bool = True
) -> None:
    """``episode_info=True``: the runtime's episode ids (one per lane) and completed episodes."""
    if "episode_ids" in runtime:
        info["episode_ids"] = np.array(runtime["episode_ids"], dtype=object)
        info["_episode_ids"] = np.ones(n, dtype=bool)
    if completed and "completed_episodes" in runtime:
        info["completed_episodes"] = runtime["completed_episodes"]
