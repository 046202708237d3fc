"""``RemoteEnv`` and ``RemoteVectorEnv``: drive a served env as if it were local (CLT-1..13).

The classes here decode tensor leaves to ``rlmesh.Tensor`` (the dependency-free
flavour); ``rlmesh.numpy.RemoteEnv`` and friends only swap the value bridge.

Vector clients (``RemoteVectorEnv``): every value has a leading lane axis; the
spaces (``single_observation_space``, and ``observation_space`` as its alias)
describe one lane; the autoreset mode is the endpoint's (``env_contract.
autoreset_mode``); ``info`` is one dict for all lanes plus the runtime keys
``episode_ids`` and ``completed_episodes``. After a request timeout the env may
still have executed the request: the next call discards the late reply, but
reset before relying on episode bookkeeping again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .._autoreset import Autoreset
from .._bridge import NUMPY, PLAIN, Bridge, _identity
from .._build import resolve_declared_edition
from .._dtypes import np_dtype
from .._ids import new_episode_id, uuid7
from .._plan import value_plan
from ..errors import (
    AlreadyPendingCallError,
    EnvironmentException,
    NoAsyncCallError,
    ProtocolException,
)
from ..spaces._quick import compile_quick_box
from ..spaces._spec import SpaceSpec
from ..transport import resolve_address
from ..wire import messages as m
from ..wire.meta import normalize
from ._dial import check_timeout
from ._facts import EnvFacts
from ._info import plain_info
from ._lanes import _BOOL, _F8, replace_rows, step_lanes
from ._session import ClientSession

__all__ = ["RemoteEnv", "RemoteVectorEnv"]

log = logging.getLogger("rlmesh.client")


class _RemoteEnvBase(EnvFacts):
    _bridge: ClassVar[Bridge] = PLAIN
    _vector: ClassVar[bool] = False
    #: Advisory ``Hello.capabilities`` this kind of client sends (HS-8).
    _hello_capabilities: ClassVar[dict[str, str]] = {}
    #: Hand info's numpy values over as plain lists/scalars (the seed flavours' vector clients).
    _plain_info: ClassVar[bool] = False
    #: Put the runtime keys in ``runtime`` (a dict the owner resets per request), not ``info``.
    _runtime_aside: ClassVar[bool] = False
    runtime: dict[str, Any]

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
        wait_for_slot: bool = False,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        connect_timeout = check_timeout("connect_timeout_seconds", connect_timeout_seconds)
        self._request_timeout = check_timeout("request_timeout_seconds", request_timeout_seconds)
        self._bridge.ensure_available()  # CLT-3: before dialing
        addr = resolve_address(
            address, host=host, port=port, path=path, transport=transport, bind=False
        )
        declared = resolve_declared_edition(workflow_edition)
        self._env_id = uuid7()  # this connection's UUIDv7 (CLT-7)
        self._session = ClientSession.connect(
            addr,
            service="env",
            component="rlmesh-env",
            declared=declared,
            connect_timeout=connect_timeout,
            request_timeout=self._request_timeout,
            noun="an env",
            wait_for_slot=bool(wait_for_slot),
            capabilities=self._hello_capabilities,
            token=token,
            tls_ca=tls_ca,
        )
        contract = self._accept_contract(addr.url)
        n = contract.num_envs
        self._lanes: int | None = n if self._vector else None
        self._num_envs = n
        self._autoreset = contract.autoreset_mode if self._vector else "Disabled"
        obs, act = contract.observation_space, contract.action_space
        self._tms = (
            int(self._request_timeout * 1000) if self._request_timeout else 0
        )  # Step.timeout_ms
        self._bind_plans(obs, act)
        self._episode_ids: list[str] = [""] * n
        self._over = np.zeros(n, dtype=bool)  # lanes whose episode ended and was not restarted
        self._ended = False  # a scalar client's _over[0], as a plain bool (read every step)
        self._no_flags = bytes(n)  # a vector step's flag bytes when no lane ended
        self._push: dict[int, str] = {}
        self._last_obs: Any = None
        self._shadow_warned: set[str] = set()
        self._obs_space: Any = None
        self._act_space: Any = None
        self._metadata: Mapping[str, Any] | None = None
        self._step_pending = False  # step_async sent a step whose reply step_wait has not read
        # INFO-3 on the step road: the runtime keys go straight into info unless a subclass
        # routes them elsewhere (``_inject`` overridden) or the env uses the same key
        self._own_inject = type(self)._inject is _RemoteEnvBase._inject and not self._runtime_aside

    def _bind_plans(self, obs: SpaceSpec, act: SpaceSpec) -> None:
        """Resolve once what every step uses: the value plans' stages and shortcuts (issue 24)."""
        bridge = self._bridge
        obs_plan = value_plan(obs, lanes=self._lanes, bridge=bridge)
        self._obs_join = obs_plan.join
        self._obs_decode = obs_plan.decode
        self._obs_identity = obs_plan.decode is _identity  # decoding changes nothing (numpy)
        k = self._n_obs_segments = obs_plan.segment_count
        self._step_segments = (
            k + 3 if self._vector else k
        )  # the vector reply adds three lane arrays
        # one array leaf at the root (not bool, whose bytes are checked): the reply's segment
        # is viewed as the observation directly, after the join's own checks, inline
        self._obs_view: tuple[np.dtype[Any], tuple[int, ...], int, bool] | None = None
        if (
            obs_plan.leaf == "segment"
            and obs.kind in ("box", "multi_binary", "multi_discrete")
            and obs.dtype != "bool"
        ):
            dt = np_dtype(obs.dtype)
            shape = tuple(obs._shape) if self._lanes is None else (self._lanes, *obs._shape)
            nbytes = dt.itemsize
            for d in shape:
                nbytes *= d
            self._obs_view = (dt, shape, nbytes, len(shape) != 1)  # (..., reshape needed)
        act_plan = value_plan(act, lanes=self._lanes, bridge=bridge)
        # a small float Box: the NaN test in the same pass as the structure (issue 40)
        quick = compile_quick_box(act, self._lanes, ranged=False, otherwise=act_plan.encode)
        self._act_encode = act_plan.encode if quick is None else quick
        self._act_to_host = None if bridge.host_values else bridge.encode
        self._act_leaf = act_plan.leaf  # "segment" / "scalar": the split is known, else None
        self._act_split = act_plan.split

    # -- requests ------------------------------------------------------------------------------

    def _reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        return self._reset_recv(self._reset_send(seeds, options, env_indices, seed_int=seed_int))

    def _reset_send(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
    ) -> tuple[list[str], list[int], int]:
        """The sending half of a reset (a many-endpoint vector env sends to all, then gathers)."""
        self._check_idle("reset")
        count = len(env_indices) if env_indices else self._num_envs
        ids = [new_episode_id() for _ in range(count)]
        opts = None if options is None else normalize(dict(options), "$options")
        req = m.Reset(
            seeds=seeds,
            options=opts,
            episode_ids=ids,
            env_indices=env_indices,
            timeout_ms=self._tms,
            seed_int=seed_int,
        )
        self._session.send(req, timeout=self._request_timeout)
        return ids, env_indices, count

    def _reset_recv(
        self, sent: tuple[list[str], list[int], int], timeout: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """The gathering half; ``timeout`` (a fan-out round's time left) or ``request_timeout_seconds``."""
        ids, env_indices, count = sent
        reply, frame = self._session.receive(timeout=timeout or self._request_timeout)
        try:
            canonical = self._join_reset(reply, frame, env_indices, count)
        except ProtocolException as exc:
            self._session.fail(exc)
            raise
        if env_indices:
            for i, eid in zip(env_indices, ids):
                self._episode_ids[i] = eid
                self._push.pop(i, None)
            self._over[env_indices] = False
        else:
            self._episode_ids = ids
            self._push = {}
            self._over[:] = False
            self._ended = False
        self._last_obs = canonical
        info = dict(reply.info) if reply.info else {}
        if info and self._plain_info:  # the seeds' info values (client/_info.py)
            info = plain_info(info)
        self._inject(info, "episode_ids", list(self._episode_ids))
        return self._obs_decode(canonical), info

    def _check_idle(self, op: str) -> None:
        if self._step_pending:
            raise AlreadyPendingCallError(
                f"{op}() while a step is in flight on '{self._address}': call step_wait() first "
                "(every step_async(action) is followed by exactly one step_wait())"
            )

    def step_async(self, action: Any) -> None:
        """Send one step and return at once; :meth:`step_wait` returns its result.

        With many endpoints, send to each of them first and gather after: the servers
        then work at the same time (issue 26). ``step(a)`` is ``step_async(a)`` then
        ``step_wait()``.

        Raises:
            AlreadyPendingCallError: a step is already in flight (call ``step_wait()``).
            ValueError: the action does not fit the action space (nothing is sent).
            SessionClosed / ConnectionLost: as :meth:`step`.
        """
        self._step_send(action)

    def step_wait(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The result of the step :meth:`step_async` sent: what ``step`` returns.

        The request timeout (``request_timeout_seconds``) counts from this call; a
        timeout or a lost peer behaves as in ``step()`` (after a timeout the late reply
        is discarded by the next request; reset before relying on episode bookkeeping).

        Raises:
            NoAsyncCallError: no step is in flight (call ``step_async(action)`` first).
            RequestTimeout / ConnectionLost / EnvironmentException: as :meth:`step`.
        """
        return self._step_recv()

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Apply one action (a batch, one per lane, on a vector client).

        Returns ``(obs, reward, terminated, truncated, info)`` (batched on a vector
        client). The same as ``step_async(action)`` then ``step_wait()``, on one straight
        road (issue 24): everything that does not change per step was resolved at connect.

        Raises:
            AlreadyPendingCallError: a ``step_async`` is in flight (call ``step_wait()``).
            ValueError / TypeError: the action does not fit the action space (nothing is sent).
            RequestTimeout: no reply within ``request_timeout_seconds`` (the client stays usable).
            ConnectionLost / SessionClosed: the env is gone, or this client was closed.
            EnvironmentException: the env's step raised.
        """
        if self._step_pending:
            raise AlreadyPendingCallError(
                f"step() while a step is in flight on '{self._address}': call step_wait() first"
            )
        # ledger: action
        to_host = self._act_to_host
        value = self._act_encode(action if to_host is None else to_host(action))
        leaf = self._act_leaf
        if leaf == "segment":
            scalars, segments = [], [value]
        elif leaf == "scalar":
            scalars, segments = [value], []
        else:
            scalars, segments = self._act_split(value)
        # ledger: call
        push = self._push
        if push:
            self._push = {}
        reply, frame = self._session.call(
            m.Step(scalars, push, self._tms),  # positional: Step's field order
            segments,
            timeout=self._request_timeout,
        )
        return self._step_result(reply, frame)

    def _step_send(self, action: Any) -> None:
        if self._step_pending:
            raise AlreadyPendingCallError(
                f"step_async() while a step is in flight on '{self._address}': call step_wait() first"
            )
        to_host = self._act_to_host  # as in step(): the value plan's stages, resolved at connect
        value = self._act_encode(action if to_host is None else to_host(action))
        leaf = self._act_leaf
        if leaf == "segment":
            scalars, segments = [], [value]
        elif leaf == "scalar":
            scalars, segments = [value], []
        else:
            scalars, segments = self._act_split(value)
        push, self._push = self._push, {}
        req = m.Step(action=scalars, episode_ids=push, timeout_ms=self._tms)
        self._session.send(req, segments, timeout=self._request_timeout)
        self._step_pending = True

    def _step_recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The gathering half; ``timeout`` (a fan-out round's time left) or ``request_timeout_seconds``."""
        if not self._step_pending:
            raise NoAsyncCallError(
                f"step_wait() on '{self._address}' with no step in flight: call step_async(action) first"
            )
        self._step_pending = False
        reply, frame = self._session.receive(timeout=timeout or self._request_timeout)
        return self._step_result(reply, frame)

    def _step_result(self, reply: Any, frame: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """A step reply as ``step`` returns it; the episode bookkeeping (INFO-1..3, AR-9)."""
        try:  # a reply that does not decode ends the session (STYLE: an error freezes the state)
            segs = frame.segments
            view = self._obs_view
            if (
                view is not None
                and len(segs) == self._step_segments
                and not reply.obs
                and segs[0].nbytes == view[2]
            ):  # one array leaf: the join's checks, inline
                canonical = segs[0].view(view[0])
                if view[3]:
                    canonical = canonical.reshape(view[1])
            else:
                k = self._n_obs_segments
                canonical = self._obs_join(reply.obs, segs[:k] if self._vector else segs)
            self._last_obs = canonical
            info = dict(reply.info) if reply.info else {}
            if info and self._plain_info:  # the seeds' info values (client/_info.py)
                info = plain_info(info)
            self._last_completed = reply.completed
            if self._vector:
                k, n = self._n_obs_segments, self._num_envs
                if (
                    len(segs) == k + 3
                    and segs[k].nbytes == 8 * n
                    and segs[k + 1].tobytes() == self._no_flags == segs[k + 2].tobytes()
                ):  # no lane ended (most steps): step_lanes' first case inline, no call
                    rewards, done = segs[k].view(_F8), None
                    terminated, truncated = np.zeros(n, _BOOL), np.zeros(n, _BOOL)
                else:  # a lane ended, or a reply step_lanes rejects
                    rewards, terminated, truncated, done = step_lanes(segs, k, n, self._no_flags)
                ended: list[int] = [] if done is None else done.nonzero()[0].tolist()
                # INFO-2: each episode once; a lane left done (DISABLED) is not recounted
                completed = len((done & ~self._over).nonzero()[0]) if ended else 0
            else:
                terminated, truncated = reply.terminated, reply.truncated
                ended_now = bool(terminated or truncated)
                completed = 1 if ended_now and not self._ended else 0  # DEC-5, once
            if self._own_inject and "episode_ids" not in info and "completed_episodes" not in info:
                info["episode_ids"] = list(self._episode_ids)
                info["completed_episodes"] = completed
            elif self._runtime_aside:  # as _inject does, inline: no call per step
                self.runtime["episode_ids"] = list(self._episode_ids)
                self.runtime["completed_episodes"] = completed
            else:
                self._inject(info, "episode_ids", list(self._episode_ids))
                self._inject(info, "completed_episodes", completed)
            if self._vector:
                if ended:
                    if self._autoreset == Autoreset.DISABLED:
                        self._over |= done
                    else:  # AR-9: roll ids for the next step
                        for i in ended:
                            eid = uuid7()  # new_episode_id, without the call in between
                            self._episode_ids[i] = eid
                            self._push[i] = eid
                if self._bridge is NUMPY:
                    return canonical, rewards, terminated, truncated, info
                rewards, terminated, truncated = self._bridge.decode_lanes(
                    rewards, terminated, truncated
                )
                return self._obs_decode(canonical), rewards, terminated, truncated, info
            if ended_now:
                self._ended = True
            if self._obs_identity:
                return canonical, reply.reward, terminated, truncated, info
            return self._obs_decode(canonical), reply.reward, terminated, truncated, info
        except ProtocolException as exc:
            self._session.fail(exc)
            raise

    def _join_reset(self, reply: Any, frame: Any, env_indices: list[int], count: int) -> Any:
        if env_indices:
            part = value_plan(self._contract.observation_space, lanes=count).join(
                reply.obs, frame.segments
            )
            return replace_rows(self._last_obs, part, env_indices)
        return self._obs_join(reply.obs, frame.segments)

    def _inject(self, info: dict[str, Any], key: str, value: Any) -> None:
        """INFO-3: the env's own key of the same name wins; say so once (or: into ``runtime``)."""
        if self._runtime_aside:
            self.runtime[key] = value
            return
        if key in info:
            if key not in self._shadow_warned:
                self._shadow_warned.add(key)
                log.warning(
                    "the env's info key %r shadows the runtime-reserved key of the same name", key
                )
            return
        info[key] = value

    def _space_query(self, msg: Any) -> Any:
        """Ask the env's own space (an opaque space's sample/contains, client/_opaque.py)."""
        self._check_idle("sample/contains of an opaque space")
        reply, _ = self._session.request(msg, timeout=self._request_timeout)
        return reply

    def render(self, *, env_index: int = 0) -> Any:
        """Render a frame (uint8 HxW, HxWx3 or HxWx4), or ``None`` when the env has none."""
        self._check_idle("render")
        reply, frame = self._session.request(
            m.Render(env_index=env_index, timeout_ms=self._tms), timeout=self._request_timeout
        )
        if reply.format != "raw" or not frame.segments:
            return None  # RND-4: an unknown format is no frame
        shape = tuple(reply.shape)
        raw = frame.segments[0]
        if len(shape) not in (2, 3) or int(np.prod(shape)) != raw.nbytes:
            return None
        return self._bridge.decode(raw.reshape(shape))

    def close(self) -> None:
        """Detach this client; the server keeps running for the next one (CLT-10). Idempotent."""
        self._session.close("client close")

    def shutdown(self, reason: str = "owner shutdown") -> bool:
        """Ask the endpoint to stop serving; ``False`` when remote shutdown is disabled (CLT-11)."""
        return self._session.shutdown(reason)

    def __enter__(self) -> Any:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        cls = type(self)
        raise TypeError(
            f"cannot pickle a {cls.__name__}: a live connection cannot be pickled; pass the address "
            f"('{getattr(self, '_address', '?')}') and reconnect in the other process, e.g. with an env "
            "factory such as `lambda: rlmesh.gymnasium.RemoteEnv(address)`"
        )

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None and not session.closed:
            try:
                session.detach()
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(address='{getattr(self, '_address', '?')}')"


class RemoteEnv(_RemoteEnvBase):
    """Connect to one environment and preserve RLMesh-native values.

    Construction dials and handshakes: an unreachable address raises
    ``ConnectionError`` here, a busy endpoint ``EndpointBusy``, an incompatible
    one ``RuntimeError("handshake failed: ...")``.

    Args:
        address: Endpoint address such as ``"tcp://127.0.0.1:5555"`` or ``"unix:///tmp/env.sock"``.
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None`` or 0: wait forever).
        workflow_edition: Offer exactly this edition; fails here if the env lacks it.
        wait_for_slot: If every session of the endpoint is taken (``sessions=N``), keep
            asking until one frees up or ``connect_timeout_seconds`` passes, instead of
            raising ``EndpointBusy`` at once.
        token: The endpoint's token (docs/security.md); ``None``: ``$RLMESH_TOKEN``, else
            none. A wrong or missing one raises ``rlmesh.errors.AuthenticationFailed``.
        tls_ca: For a ``tls://host:port`` address: the PEM CA bundle to trust (or an
            ``ssl.SSLContext``); ``None``: ``$RLMESH_TLS_CA``, else the system store.

    Example:
        >>> import gymnasium as gym, rlmesh
        >>> server = rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
        >>> env = rlmesh.RemoteEnv(server.address)
        >>> obs, info = env.reset(seed=42)
        >>> obs
        Tensor(dtype='float32', shape=[4], bytes=16)
        >>> env.close(); server.shutdown()
    """

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode; ``info`` carries ``episode_ids`` (INFO-1)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        return self._reset([] if seed is None else [int(seed)], options, [])


class RemoteVectorEnv(_RemoteEnvBase):
    """Connect to a vector (or lane) endpoint and preserve RLMesh-native values.

    ``RemoteVectorEnv([addr0, addr1, ...])`` (a list) is one vector env over many
    endpoints, stepped by sending to all, then gathering; see
    :class:`rlmesh.client._multi.MultiEndpointVectorEnv` and docs/scaling.md.

    Every returned value has a leading lane axis of ``num_envs``; spaces describe
    one lane. ``info`` is one dict for all lanes and carries ``episode_ids`` and
    ``completed_episodes`` (an env key of the same name wins).
    """

    _vector = True
    _plain_info = True

    def __new__(cls, address: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A list (or tuple) of addresses makes one vector env over many endpoints (issue 26)."""
        if isinstance(address, (list, tuple)):
            return object.__new__(MULTI_CLASS[0](cls))
        return object.__new__(cls)

    @property
    def num_envs(self) -> int:
        """Number of environment instances served by the endpoint."""
        return self._num_envs

    @property
    def single_observation_space(self) -> Any:
        return self.observation_space

    @property
    def single_action_space(self) -> Any:
        return self.action_space

    @property
    def autoreset_mode(self) -> str:
        """``"NextStep"``, ``"SameStep"`` or ``"Disabled"`` (the endpoint's mode)."""
        return self._autoreset

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        env_indices: Sequence[int] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all lanes, or only ``env_indices`` (partial reset, where the endpoint allows it).

        An int ``seed`` seeds lane ``i`` with ``seed + i`` (Gymnasium's rule); a list
        gives one seed per lane reset. The served vector env is called in the form
        given: ``reset(seed=s)`` for an int, ``reset(seed=[a, b, ...])`` for a list
        (ENVCALL-1, CNF2-A3). A partial reset returns the full batch: the reset
        lanes' new observations and the other lanes' latest ones.
        """
        indices = [int(i) for i in env_indices] if env_indices is not None else []
        count = len(indices) or self._num_envs
        if indices and self._last_obs is None:
            raise EnvironmentException(
                "a partial reset (env_indices) needs a full reset() first; call reset() without env_indices",
                code="NOT_READY",
                op="reset",
            )
        seed_int = False
        if seed is None:
            seeds: list[int | None] = []
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(count)]  # per-lane books record seed + i (OPP-26)
            seed_int = True
        else:
            seeds = [None if s is None else int(s) for s in seed]  # type: ignore[union-attr]
            if len(seeds) != count:
                raise ValueError(f"expected {count} seeds (one per lane), got {len(seeds)}")
        return self._reset(seeds, options, indices, seed_int=seed_int)


#: ``[multi_class]``: ``rlmesh.client._multi`` registers the maker of the many-endpoint
#: subclasses here when the package loads (it imports this module, so not the reverse).
MULTI_CLASS: list[Any] = []
