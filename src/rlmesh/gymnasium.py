"""Gymnasium flavour: remote envs that *are* Gymnasium objects (needs the ``gymnasium`` extra).

:class:`RemoteEnv` is a real :class:`gymnasium.Env` and :class:`RemoteVectorEnv` a
real :class:`gymnasium.vector.VectorEnv`: their spaces are Gymnasium spaces, their
values NumPy arrays, and their ``info`` follows Gymnasium's conventions, so
``check_env``, the standard wrappers, Stable-Baselines3 and CleanRL-style loops
take them as they are. Compared with :mod:`rlmesh.numpy`:

- ``info`` holds only the env's own keys; ``episode_info=True`` adds the runtime
  keys (``episode_ids``, ``completed_episodes``, conformance warnings);
- the vector client's ``observation_space``/``action_space`` are batched (the
  ``single_*`` spaces describe one lane), ``metadata["autoreset_mode"]`` is a
  :class:`gymnasium.vector.AutoresetMode`, and per-lane info values are arrays with
  ``_key`` masks (``final_obs``/``final_info`` under SAME_STEP autoreset);
- ``spec`` is a :class:`gymnasium.envs.registration.EnvSpec` naming the served id.

Importing this module registers ``rlmesh/Remote-v0``::

    >>> import gymnasium as gym, rlmesh.gymnasium  # doctest: +SKIP
    >>> env = gym.make("rlmesh/Remote-v0", address="127.0.0.1:50051")  # doctest: +SKIP

A live connection cannot be pickled: pass the address and connect in the process
that uses the env (``SubprocVecEnv([lambda: RemoteEnv(addr)] * 4)``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlmesh import _keys, numpy as _rnp
from rlmesh._autoreset import Autoreset
from rlmesh.client._fanout import FanOut
from rlmesh.errors import AuthenticationFailed, EndpointBusy
from rlmesh.spaces._gym import to_gymnasium_space
from rlmesh.transport import resolve_address

__all__ = ["REMOTE_ID", "RemoteEnv", "RemoteVectorEnv"]

log = logging.getLogger("rlmesh.gymnasium")

#: The id registered with Gymnasium on import: ``gymnasium.make(REMOTE_ID, address=...)``.
REMOTE_ID = "rlmesh/Remote-v0"
_WARNING_KEY = _keys.CONFORMANCE_WARNING_KEY
_MODES = {
    Autoreset.NEXT_STEP.value: AutoresetMode.NEXT_STEP,
    Autoreset.SAME_STEP.value: AutoresetMode.SAME_STEP,
    Autoreset.DISABLED.value: AutoresetMode.DISABLED,
}


def _pickle_error(cls: type) -> TypeError:
    return TypeError(
        f"cannot pickle a {cls.__module__}.{cls.__name__}: a live connection cannot be pickled; "
        f"pass the address and reconnect in the other process (for example an env factory "
        f"`lambda: rlmesh.gymnasium.RemoteEnv(address)` for SubprocVecEnv)"
    )


class _ScalarClient(_rnp.RemoteEnv):
    """The NumPy client; the runtime info keys go to ``runtime``, never into ``info``."""

    runtime: dict[str, Any]

    def _inject(self, info: dict[str, Any], key: str, value: Any) -> None:
        self.runtime[key] = value


class _VectorClient(_rnp.RemoteVectorEnv):
    runtime: dict[str, Any]
    _plain_info = False  # Gymnasium's own vector-info layout keeps arrays (and their dtypes)

    def _inject(self, info: dict[str, Any], key: str, value: Any) -> None:
        self.runtime[key] = value


class _Shared:
    """One connection and the Gymnasium objects of this process using it."""

    def __init__(self, client: Any, key: tuple[type, str]) -> None:
        self.client = client
        self.key = key
        self.refs = 1
        self.owner: Any = None  # the handle whose reset started the served episode (issue 29)

    def release(self) -> None:
        self.refs -= 1
        if self.refs <= 0:
            if _LIVE.get(self.key) is self:
                del _LIVE[self.key]
            self.client.close()


_LIVE: dict[tuple[type, str], _Shared] = {}


def _connect(cls: type, address: str | None, kwargs: dict[str, Any]) -> _Shared:
    """Dial the endpoint; if it is busy with this very process's connection, share that one.

    An endpoint serves one session at a time, so ``env.spec.make()`` (which
    ``check_env`` and some tools call while ``env`` is open) gets a second
    handle on the same served env rather than a refusal.
    """
    try:
        client = cls(address, **kwargs)
    except (EndpointBusy, AuthenticationFailed):
        # ``env.spec.make()`` dials again without the token (a spec never holds one): this
        # process's own live connection to the endpoint is shared, as for a busy one
        url = resolve_address(
            address,
            host=kwargs.get("host"),
            port=kwargs.get("port"),
            path=kwargs.get("path"),
            transport=kwargs.get("transport"),
            bind=False,
        ).url
        shared = _LIVE.get((cls, url))
        if shared is None or shared.client.closed:
            exc = sys.exc_info()[1]
            if isinstance(exc, AuthenticationFailed):
                raise
            raise EndpointBusy(f"{exc}. {_ONE_SESSION_HINT}") from None
        log.info("the endpoint at %s is busy with this process's own connection; sharing it", url)
        shared.refs += 1
        return shared
    client.runtime = {}
    key = (cls, client.address)
    shared = _Shared(client, key)
    _LIVE.setdefault(key, shared)
    return shared


_ONE_SESSION_HINT = (
    "Each Gymnasium handle needs a session of its own: serve the env with several sessions "
    "(rlmesh serve ENV --sessions N, EnvServer(target, sessions=N)), or serve N lanes (--num-envs N) "
    "and use gymnasium.make_vec(..., vectorization_mode='vector_entry_point') / "
    "rlmesh.gymnasium.RemoteVectorEnv, or give each handle its own endpoint (RemoteVectorEnv([...]))"
)


#: What the vector client says of a one-env endpoint (client/_env.py).
_SINGLE_ENV = "serves a single environment"


def _one_env_endpoint(error: str, num_envs: int) -> str:
    """``gymnasium.make_vec("rlmesh/Remote-v0", num_envs=N, address=...)`` on a one-env endpoint.

    >>> print(_one_env_endpoint("Endpoint 'tcp://127.0.0.1:5555' serves a single environment (num_envs=1).", 4))
    gymnasium.make_vec('rlmesh/Remote-v0', num_envs=4) needs 4 envs, but the endpoint at 'tcp://127.0.0.1:5555' serves a single env. Either serve 4 lanes there (rlmesh serve ENV --num-envs 4) and keep this call, or serve 4 sessions (rlmesh serve ENV --sessions 4) and pass vectorization_mode="sync" to make_vec: it opens one RemoteEnv, and so one session, per env
    """
    where = error.split("'")[1] if error.count("'") >= 2 else "this address"
    return (
        f"gymnasium.make_vec({REMOTE_ID!r}, num_envs={num_envs}) needs {num_envs} envs, but the endpoint "
        f"at '{where}' serves a single env. Either serve {num_envs} lanes there (rlmesh serve ENV "
        f"--num-envs {num_envs}) and keep this call, or serve {num_envs} sessions (rlmesh serve ENV "
        f'--sessions {num_envs}) and pass vectorization_mode="sync" to make_vec: it opens one '
        "RemoteEnv, and so one session, per env"
    )


def _shared_step_error(address: str) -> EndpointBusy:
    return EndpointBusy(
        f"two Gymnasium handles in this process share the one session of the env at '{address}', and the "
        f"other handle reset it since this one did: stepping now would step the other's episode. {_ONE_SESSION_HINT}"
    )


def _spec_of(
    client: Any, *, vector: bool = False, kwargs: Mapping[str, Any] | None = None
) -> EnvSpec | None:
    """A Gymnasium ``EnvSpec`` for the served env: its id and, where published, ``max_episode_steps``."""
    md = client.metadata
    steps = md.get("max_episode_steps") if isinstance(md, Mapping) else None
    steps = (
        int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    )
    try:
        return EnvSpec(
            id=client.env_contract.id,
            entry_point=f"rlmesh.gymnasium:{'RemoteVectorEnv' if vector else 'RemoteEnv'}",
            max_episode_steps=steps,
            kwargs=dict(kwargs or {}),
        )
    except Exception:  # an id Gymnasium cannot parse: no spec rather than a failure
        return None


def _filtered(info: dict[str, Any], runtime: dict[str, Any] | None) -> dict[str, Any]:
    """The env's own info; with ``runtime`` (``episode_info=True``) the runtime keys too (the env's win)."""
    if runtime is None:
        warnings = info.pop(_WARNING_KEY, None)
        if warnings:
            log.warning("rlmesh conformance warning from the env: %s", warnings)
        return info
    for key, value in runtime.items():
        info.setdefault(key, value)
    return info


def _as_space_value(space: gymnasium.Space[Any], value: Any) -> Any:
    """A plain value that travelled through the metadata codec, back in ``space``'s types."""
    gs = gymnasium.spaces
    if value is None:
        return None
    if isinstance(space, gs.Dict) and isinstance(value, Mapping):
        return {
            k: _as_space_value(sub, value[k]) if k in value else None
            for k, sub in space.spaces.items()
        }
    if isinstance(space, gs.Tuple) and isinstance(value, (list, tuple)):
        return tuple(_as_space_value(sub, v) for sub, v in zip(space.spaces, value))
    if isinstance(space, gs.Text):
        return value
    if isinstance(space, gs.Discrete):
        return (
            np.asarray(value, dtype=space.dtype).reshape(())[()] if np.ndim(value) == 0 else value
        )
    dtype = getattr(space, "dtype", None)
    return np.asarray(value, dtype=dtype)


class RemoteEnv(gymnasium.Env):
    """A served env as a real :class:`gymnasium.Env` (Gymnasium spaces, NumPy values).

    Construction dials and handshakes like :class:`rlmesh.numpy.RemoteEnv` and takes
    the same keywords, plus ``episode_info``.

    Args:
        address: Endpoint address such as ``"127.0.0.1:50051"`` or ``"unix:///tmp/env.sock"``.
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None`` or 0: wait forever).
        workflow_edition: Offer exactly this edition.
        token: The endpoint's token (``None``: ``$RLMESH_TOKEN``, else none); a wrong or
            missing one raises ``rlmesh.errors.AuthenticationFailed``.
        tls_ca: For ``tls://`` addresses: the CA bundle to trust (``None``: ``$RLMESH_TLS_CA``,
            else the system store).
        episode_info: Add the runtime keys (``episode_ids``, ``completed_episodes``,
            conformance warnings) to ``info``. Off by default, so ``info`` is exactly
            the env's own (``check_env``'s determinism check needs that).

    Raises:
        ValueError: the endpoint serves several lanes (use :class:`RemoteVectorEnv`).
        ConnectionError: nothing answers at ``address``.
    """

    #: What ``gymnasium.make`` may ask for before connecting; an instance's ``metadata``
    #: lists the one mode its server renders.
    metadata: dict[str, Any] = {"render_modes": ["rgb_array", "ansi", "human", "depth_array"]}

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
        render_mode: str | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        kwargs = dict(
            host=host,
            port=port,
            path=path,
            transport=transport,
            connect_timeout_seconds=connect_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            workflow_edition=workflow_edition,
            token=token,
            tls_ca=tls_ca,
        )
        self._shared: _Shared | None = _connect(_ScalarClient, address, kwargs)
        self._client = self._shared.client
        served = self._client.render_mode
        if render_mode is not None and render_mode != served:
            self.close()
            raise ValueError(
                f"the env at '{self._client.address}' renders {served!r}, not {render_mode!r}; "
                f"the render mode is chosen where the env is served"
            )
        self._episode_info = bool(episode_info)
        self.observation_space = to_gymnasium_space(self._client.observation_space_spec)
        self.action_space = to_gymnasium_space(self._client.action_space_spec)
        self.metadata = dict(self._client.metadata)
        self.metadata["render_modes"] = (
            [served] if served else []
        )  # the served mode is the only one
        self.render_mode = served
        self.spec = _spec_of(self._client, kwargs={"address": self._client.address})

    @property
    def address(self) -> str:
        """The endpoint address this env is connected to."""
        return str(self._client.address)

    @property
    def client(self) -> Any:
        """The underlying :class:`rlmesh.numpy.RemoteEnv` connection."""
        return self._client

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode on the served env (``seed`` seeds it there, and ``np_random`` here)."""
        super().reset(seed=seed)
        client = self._client
        client.runtime = {}
        obs, info = client.reset(seed=seed, options=options)
        if self._shared is not None:
            self._shared.owner = self
        return obs, _filtered(info, client.runtime if self._episode_info else None)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply one action: ``(obs, reward, terminated, truncated, info)``."""
        shared = self._shared
        if (
            shared is not None
            and shared.refs > 1
            and shared.owner is not self
            and shared.owner is not None
        ):
            raise _shared_step_error(
                str(self._client.address)
            )  # issue 29: never step another handle's episode
        self._client.runtime = {}
        return self._result(
            *self._client.step(action)
        )  # the client's straight step road (issue 24)

    def step_async(self, action: Any) -> None:
        """Send one step and return at once; :meth:`step_wait` returns its result (see
        :meth:`rlmesh.numpy.RemoteEnv.step_async`)."""
        shared = self._shared
        if (
            shared is not None
            and shared.refs > 1
            and shared.owner is not self
            and shared.owner is not None
        ):
            raise _shared_step_error(
                str(self._client.address)
            )  # issue 29: never step another handle's episode
        self._client.step_async(action)

    def step_wait(self) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The result of the step :meth:`step_async` sent (``NoAsyncCallError`` if none)."""
        self._client.runtime = {}
        return self._result(*self._client.step_wait())

    def _result(
        self,
        obs: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return (
            obs,
            reward,
            terminated,
            truncated,
            _filtered(info, self._client.runtime if self._episode_info else None),
        )

    def render(self) -> Any:
        """The served env's frame (an ``HxWx3`` uint8 array for ``rgb_array``), or ``None``."""
        return self._client.render()

    def close(self) -> None:
        """Detach from the endpoint (the server keeps running). Idempotent."""
        shared, self._shared = getattr(self, "_shared", None), None
        if shared is not None:
            if shared.owner is self:
                shared.owner = None
            shared.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise _pickle_error(type(self))

    def __repr__(self) -> str:
        return f"<RemoteEnv address='{getattr(getattr(self, '_client', None), 'address', '?')}'>"


class RemoteVectorEnv(VectorEnv):
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
        kwargs = dict(
            host=host,
            port=port,
            path=path,
            transport=transport,
            connect_timeout_seconds=connect_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            workflow_edition=workflow_edition,
            token=token,
            tls_ca=tls_ca,
        )
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
        self._episode_info = bool(episode_info)
        self.num_envs = int(self._client.num_envs)
        self.single_observation_space = to_gymnasium_space(self._client.observation_space_spec)
        self.single_action_space = to_gymnasium_space(self._client.action_space_spec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.autoreset_mode = _MODES[self._client.autoreset_mode]
        self.metadata = dict(self._client.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = self._client.render_mode
        # as on RemoteEnv: the modes this handle renders (the served one); the env's own
        # list stays on the numpy client (`envs.client.metadata["render_modes"]`)
        self.metadata["render_modes"] = [self.render_mode] if self.render_mode else []
        self.spec = _spec_of(self._client, vector=True, kwargs={"address": self._client.address})

    @property
    def address(self) -> str:
        """The endpoint address this env is connected to."""
        return str(self._client.address)

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
            super().reset(seed=int(seed))
        opts, indices = _reset_mask(options, self.num_envs)
        if indices is not None and len(indices) == self.num_envs:
            indices = None
        if (
            indices is not None
            and isinstance(seed, (int, np.integer))
            and not isinstance(seed, bool)
        ):
            seed = [int(seed) + i for i in indices]
        elif indices is not None and seed is not None and len(seed) == self.num_envs:  # type: ignore[arg-type]
            seed = [seed[i] for i in indices]  # type: ignore[index]  # Gymnasium's per-lane list
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

    def __del__(self) -> None:
        try:
            self.close_extras()
        except Exception:
            pass

    def close_extras(self, **kwargs: Any) -> None:
        """Detach from the endpoint (the server keeps running). Idempotent."""
        shared, self._shared = getattr(self, "_shared", None), None
        if shared is not None:
            shared.release()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise _pickle_error(type(self))

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
            if "episode_ids" in runtime:
                out["episode_ids"] = np.array(runtime["episode_ids"], dtype=object)
                out["_episode_ids"] = np.ones(n, dtype=bool)
            if "completed_episodes" in runtime:
                out["completed_episodes"] = runtime["completed_episodes"]
        elif warnings:
            log.warning("rlmesh conformance warning from the env: %s", warnings)
        return out


class _ManyEndpoints(RemoteVectorEnv):
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
        self._fan = FanOut(
            list(address),
            connect_timeout_seconds=connect_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            workflow_edition=workflow_edition,
            autoreset_mode=autoreset_mode,
            token=token,
            tls_ca=tls_ca,
        )
        first = self._fan.parts[0].client
        if num_envs is not None and num_envs != self._fan.num_envs:
            self._fan.close()
            raise ValueError(
                f"the endpoints {self._fan.addresses} serve {self._fan.num_envs} lanes in all, not {num_envs}"
            )
        self._episode_info = bool(episode_info)
        self.num_envs = self._fan.num_envs
        self.single_observation_space = to_gymnasium_space(first.observation_space_spec)
        self.single_action_space = to_gymnasium_space(first.action_space_spec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.autoreset_mode = _MODES[self._fan.mode]
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self.metadata["render_modes"] = (
            [self.render_mode] if self.render_mode else []
        )  # as RemoteVectorEnv
        self.spec = _spec_of(first, vector=True, kwargs={"address": self._fan.addresses})

    @property
    def address(self) -> str:
        """The endpoint addresses, comma-separated."""
        return ", ".join(self._fan.addresses)

    @property
    def addresses(self) -> list[str]:
        """The endpoint addresses, in lane order."""
        return self._fan.addresses

    @property
    def endpoint_lanes(self) -> list[range]:
        """The global lanes each endpoint serves, in address order."""
        return [p.lanes for p in self._fan.parts]

    @property
    def client(self) -> Any:
        """The fan-out engine (``rlmesh.client._fanout.FanOut``) holding one client per endpoint."""
        return self._fan

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

    def reconnect(self, endpoint: int | str) -> None:
        """Dial endpoint ``endpoint`` (index or address) again; reset its lanes before stepping."""
        self._fan.reconnect(endpoint)

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
            n = self.num_envs
            info["episode_ids"] = np.array(runtime["episode_ids"], dtype=object)
            info["_episode_ids"] = np.ones(n, dtype=bool)
            if not reset:
                info["completed_episodes"] = runtime["completed_episodes"]
        return info


def _reset_mask(
    options: dict[str, Any] | None, num_envs: int
) -> tuple[dict[str, Any] | None, list[int] | None]:
    """``options`` without its ``reset_mask``, and the lanes the mask selects (``None``: no mask)."""
    opts = dict(options) if options else None
    if opts is None or "reset_mask" not in opts:
        return opts, None
    mask = np.asarray(opts.pop("reset_mask"), dtype=bool).reshape(-1)
    if mask.shape != (num_envs,):
        raise ValueError(f"reset_mask must be {num_envs} booleans, got shape {mask.shape}")
    indices = mask.nonzero()[0].tolist()
    if not indices:
        raise ValueError("reset_mask selects no lane")
    return opts or None, indices


def _arrayify(info: Mapping[str, Any], n: int, obs_space: gymnasium.Space[Any]) -> dict[str, Any]:
    """A served Gymnasium vector info (whose arrays became lists on the wire) with arrays again."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, Mapping):
            out[key] = _arrayify(value, n, obs_space)
        elif key == "final_obs" and isinstance(value, list) and len(value) == n:
            arr = np.full(n, None, dtype=object)
            for i, v in enumerate(value):
                arr[i] = _as_space_value(obs_space, v)
            out[key] = arr
        elif isinstance(value, list) and len(value) == n:
            if key.startswith("_"):
                out[key] = np.asarray(value, dtype=bool)
                continue
            try:
                arr = np.asarray(value)
            except ValueError:
                arr = np.empty(0)
            if arr.dtype == object or arr.shape[:1] != (n,) or arr.dtype.kind in "US":
                arr = np.full(n, None, dtype=object)
                for i, v in enumerate(value):
                    arr[i] = v
            out[key] = arr
        else:
            out[key] = value
    return out


def _register() -> None:
    if REMOTE_ID not in gymnasium.registry:
        gymnasium.register(
            id=REMOTE_ID,
            entry_point="rlmesh.gymnasium:RemoteEnv",
            vector_entry_point="rlmesh.gymnasium:RemoteVectorEnv",
        )


_register()


# -- sandboxes --------------------------------------------------------------------------------

from rlmesh.sandbox import SandboxBuild, SandboxRuntime  # noqa: E402
from rlmesh.sandbox._env import SandboxMixin  # noqa: E402

__all__ += ["SandboxEnv", "SandboxVectorEnv"]


def _sandbox_spec(env: Any, kwargs: dict[str, Any]) -> EnvSpec | None:
    """A spec whose ``make()`` starts another sandbox of the same source (``check_env`` calls it)."""
    spec = _spec_of(env.client, vector=isinstance(env, VectorEnv), kwargs=kwargs)
    if spec is None:
        return None
    spec.entry_point = f"rlmesh.gymnasium:{type(env).__name__}"
    return spec


class SandboxEnv(SandboxMixin, RemoteEnv):
    """An env in its own dependency stack as a real :class:`gymnasium.Env` (SB3 takes it as is).

    Builds (or reuses) the sandbox for ``source`` exactly as :class:`rlmesh.SandboxEnv` does
    (Docker image or cached venv; see docs/sandboxes.md), starts the env server there and
    connects to it; :meth:`close` stops the sandbox. Everything else is
    :class:`RemoteEnv`'s: Gymnasium spaces, NumPy values, the env's own ``info``.

    Args:
        source: ``gym://CartPole-v1``, ``hf://org/repo@sha``, ``docker://img:tag`` ...
        build, runtime, backend, connect_timeout_seconds: as for :class:`rlmesh.SandboxEnv`.
        episode_info: Add the runtime keys to ``info`` (see :class:`RemoteEnv`).
        render_mode: Passed to the env's ``make()`` inside the sandbox (``"rgb_array"``).
        **params: Further ``make()`` keyword arguments (JSON values).

    Raises:
        DockerUnavailable, SandboxBuildError, SandboxStartError: as :class:`rlmesh.SandboxEnv`.
        SandboxCrashed: from ``reset``/``step``/``render`` when the sandboxed server died.
    """

    def __init__(
        self,
        source: str,
        *,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        episode_info: bool = False,
        render_mode: str | None = None,
        **params: Any,
    ) -> None:
        for key in ("num_envs", "vectorization_mode"):
            if key in params:
                raise TypeError(
                    f"SandboxEnv is single-env only; use SandboxVectorEnv(source, num_envs=...) ({key}= given)"
                )
        make_params = (
            dict(params) if render_mode is None else {**params, "render_mode": render_mode}
        )
        self._episode_info_option = bool(episode_info)
        self._attach(
            source,
            num_envs=1,
            vectorization_mode=None,
            build=build,
            runtime=runtime,
            backend=backend,
            connect_timeout_seconds=connect_timeout_seconds,
            params=make_params,
        )
        options = {
            k: v
            for k, v in (("build", build), ("runtime", runtime), ("backend", backend))
            if v is not None
        }
        self.spec = _sandbox_spec(
            self,
            {
                "source": source,
                "connect_timeout_seconds": connect_timeout_seconds,
                **options,
                **params,
            },
        )

    def _connect_remote(
        self, address: str, connect_timeout_seconds: float, token: str | None = None
    ) -> None:
        RemoteEnv.__init__(
            self,
            address,
            connect_timeout_seconds=connect_timeout_seconds,
            episode_info=self._episode_info_option,
            token=token,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode in the sandbox (see :meth:`RemoteEnv.reset`)."""
        return self._guarded(RemoteEnv.reset, self, seed=seed, options=options)

    def render(self) -> Any:  # type: ignore[override]  # Gymnasium's signature, not the lane client's
        """The sandboxed env's frame (see :meth:`RemoteEnv.render`)."""
        return self._guarded(RemoteEnv.render, self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return SandboxMixin.__repr__(self)


class SandboxVectorEnv(SandboxMixin, RemoteVectorEnv):
    """``num_envs`` lanes of an env in ONE sandbox as a real :class:`gymnasium.vector.VectorEnv`.

    ``vectorization_mode=None`` serves ``num_envs`` independent ``make()`` lanes (NEXT_STEP
    autoreset); ``"sync"``/``"async"`` build a Gymnasium vector env inside the sandbox.
    Other arguments as :class:`SandboxEnv`.
    """

    def __init__(
        self,
        source: str,
        num_envs: int,
        *,
        vectorization_mode: str | None = None,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        episode_info: bool = False,
        render_mode: str | None = None,
        **params: Any,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int):
            raise TypeError(f"num_envs must be an int, got {type(num_envs).__name__}")
        if num_envs < 2:
            raise ValueError(
                f"SandboxVectorEnv needs num_envs >= 2, got {num_envs}; use SandboxEnv for one env"
            )
        if vectorization_mode not in (None, "sync", "async"):
            raise ValueError(
                f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}"
            )
        make_params = (
            dict(params) if render_mode is None else {**params, "render_mode": render_mode}
        )
        self._episode_info_option = bool(episode_info)
        self._attach(
            source,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            build=build,
            runtime=runtime,
            backend=backend,
            connect_timeout_seconds=connect_timeout_seconds,
            params=make_params,
        )
        options = {
            k: v
            for k, v in (("build", build), ("runtime", runtime), ("backend", backend))
            if v is not None
        }
        self.spec = _sandbox_spec(
            self,
            {
                "source": source,
                "num_envs": num_envs,
                "vectorization_mode": vectorization_mode,
                "connect_timeout_seconds": connect_timeout_seconds,
                **options,
                **params,
            },
        )

    def _connect_remote(
        self, address: str, connect_timeout_seconds: float, token: str | None = None
    ) -> None:
        RemoteVectorEnv.__init__(
            self,
            address,
            connect_timeout_seconds=connect_timeout_seconds,
            episode_info=self._episode_info_option,
            token=token,
        )

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane (see :meth:`RemoteVectorEnv.reset`)."""
        return self._guarded(RemoteVectorEnv.reset, self, seed=seed, options=options)

    def render(self) -> tuple[Any, ...] | None:  # type: ignore[override]  # Gymnasium's signature
        """One frame per lane (see :meth:`RemoteVectorEnv.render`)."""
        return self._guarded(RemoteVectorEnv.render, self)

    def close(self, **kwargs: Any) -> None:
        """Detach, then stop and remove the sandbox. Idempotent."""
        SandboxMixin.close(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return SandboxMixin.__repr__(self)
