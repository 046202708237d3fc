"""``PolicyClient``: an openpi policy server as an rlmesh model.

The client is a :class:`rlmesh.numpy.Model` whose corners ask the server (``predict_chunk``;
``predict`` takes the chunk's first action; ``predict_chunk_batch`` sends a vector env's lanes
side by side, one connection each): the session's route does everything else as for any
chunked model -- the
execution horizon, replaying the chunk, re-planning, ``prefetch_lead``, vector lanes, hooks,
``workers=``. At bind the route hands the env's contract and the run's instruction to
:meth:`PolicyClient._on_bind`, which compiles the observation map and the action check.

Each episode gets its own connection, opened at its first forward and closed at its end
(an openpi server keeps what it keeps per connection, so every episode starts fresh, as a
local model's would); a vector env's lanes run on one connection each. Nothing is dialled
in the constructor, and a pickled client (``workers=``) carries only its settings: each
worker connects on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._token import check_token, resolve_token
from ..errors import ShapeMismatch
from ..models import NumpyModel
from ..models._sentinels import NO_ADAPTER
from ..spaces import space_from_spec
from ..spaces._gym import as_spec
from ..transport.tls import client_context
from ._connection import DEFAULT_CONNECT_TIMEOUT_SECONDS, DEFAULT_MAX_MESSAGE_BYTES, Connection
from ._obsmap import ObservationMapper, compile_obs_map

__all__ = ["ACTIONS_KEY", "PolicyClient"]

#: The reply key that carries the action chunk (openpi's convention).
ACTIONS_KEY = "actions"


def _check_url(url: Any) -> str:
    if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
        raise ValueError(
            f"an openpi policy server's URL is ws://host:port (or wss://...), got {url!r}"
        )
    return url


def _check_timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0 or None, got {value!r}")
    return float(value)


class _ActionCheck:
    """The env's per-step action: its shape and dtype (what each frame of a chunk must be)."""

    def __init__(self, action_space: Any) -> None:
        self.shape: tuple[int, ...] | None = None
        self.dtype: np.dtype[Any] | None = None
        if action_space is None:
            return
        space = space_from_spec(as_spec(action_space, "action_space"))
        kind = getattr(space, "kind", None)
        if kind in ("dict", "tuple", "text"):
            raise TypeError(
                f"an openpi server answers one actions array per step; this env's action space "
                f"is {kind} ({space!r}) -- wrap the env so that it takes one array"
            )
        self.shape = tuple(int(d) for d in (getattr(space, "shape", None) or ()))
        self.dtype = np.dtype(str(space.dtype))

    def __call__(self, reply: Mapping[str, Any]) -> Any:
        if ACTIONS_KEY not in reply:
            raise ShapeMismatch(
                f"the openpi server's reply has no {ACTIONS_KEY!r} (its keys: {sorted(map(str, reply))})",
                key=ACTIONS_KEY,
                expected="[H, ...] actions",
                actual="missing",
            )
        a = np.asarray(reply[ACTIONS_KEY])
        if a.dtype.kind not in "biuf":
            raise ShapeMismatch(
                f"the openpi server's {ACTIONS_KEY!r} are {a.dtype}{list(a.shape)}, not numbers",
                key=ACTIONS_KEY,
                expected="numbers",
                actual=f"{a.dtype}{list(a.shape)}",
            )
        shape = self.shape
        if shape is None:  # no env to check against: whatever came is the chunk
            return np.array(a) if a.ndim else np.array(a)[None]
        if a.ndim == len(shape):
            a = a[None]  # one action: a one-frame chunk
        if a.ndim != len(shape) + 1 or a.shape[1:] != shape or a.shape[0] < 1:
            want = f"{self.dtype}[H, {', '.join(map(str, shape))}]" if shape else f"{self.dtype}[H]"
            raise ShapeMismatch(
                f"the openpi server's {ACTIONS_KEY!r} are {a.dtype}{list(a.shape)}, but this env "
                f"takes {self.dtype}{list(shape)} per step, so a chunk must be {want}; make the "
                "server's output transform emit the env's action layout",
                key=ACTIONS_KEY,
                expected=want,
                actual=f"{a.dtype}{list(a.shape)}",
            )
        return np.array(a, dtype=self.dtype)  # a writable copy in the env's dtype


class PolicyClient(NumpyModel[Any, Any]):
    """An openpi policy server (``ws://host:port``) as an rlmesh model.

    Use it wherever a model goes: ``rlmesh.run(client, env, ...)``, ``rlmesh.session``,
    ``workers=``, ``rlmesh eval ws://host:port ENV``. Each forward sends one observation
    dict (built by ``obs_map``, plus ``"prompt"``) and receives an ``{"actions": [H, D]}``
    chunk, which the session replays for ``execution_horizon`` steps before it asks again.

    Args:
        url: The server, ``ws://host:port`` (``wss://`` for TLS).
        obs_map: Server key -> what to send under it: an observation path or a role
            string, :class:`~rlmesh.openpi.Image`, :class:`~rlmesh.openpi.State`, or an
            ``rlmesh.adapters`` leaf (see :mod:`rlmesh.openpi`). ``None``: a Dict observation
            goes key by key (nested keys joined with ``/``), any other as
            ``"observation/state"``.
        prompt: The ``"prompt"`` to send when the run gives no ``instruction=``; without
            either, the env's instruction role is read when it tags one. An ``obs_map``
            entry named ``"prompt"`` wins over all three.
        connect_timeout_seconds: Bound on connecting and receiving the metadata, and on
            waiting for a busy server (default 10 s).
        request_timeout_seconds: Bound on each reply (``None``: wait as long as it takes).
        max_message_bytes: Largest reply accepted (default 256 MiB).
        token: Sent as ``Authorization: Bearer <token>`` with every connection (``None``:
            ``$RLMESH_TOKEN``, else none); a refused one raises ``AuthenticationFailed``.
        tls_ca: For ``wss://``: the PEM CA bundle to trust (``None``: ``$RLMESH_TLS_CA``,
            else the system store).

    Raises:
        ValueError: a URL that is not ``ws://`` / ``wss://``, or a bad timeout.

    During a run: ``ConnectFailed`` / ``EndpointBusy`` when no session can be opened,
    ``ConnectionLost`` when the server goes away, ``ModelError`` when it answers with an
    error, ``RequestTimeout``, and ``ShapeMismatch`` (naming the key) when an observation
    entry or the ``actions`` do not fit.

    Example:
        >>> import rlmesh.openpi
        >>> client = rlmesh.openpi.PolicyClient(
        ...     "ws://127.0.0.1:8000", obs_map={"observation/state": ""}, prompt="reach the goal"
        ... )
        >>> client
        PolicyClient('ws://127.0.0.1:8000')
    """

    def __init__(
        self,
        url: str,
        *,
        obs_map: Mapping[str, Any] | None = None,
        prompt: str | None = None,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        max_message_bytes: int | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        self.url = _check_url(url)
        self._token = check_token(token)
        self._tls_ca = tls_ca
        if obs_map is not None and not isinstance(obs_map, Mapping):
            raise TypeError(
                f"obs_map must be a mapping of server keys, got {type(obs_map).__name__}"
            )
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str or None, got {type(prompt).__name__}")
        self.obs_map = None if obs_map is None else dict(obs_map)
        self.prompt = prompt
        self.connect_timeout_seconds = (
            _check_timeout("connect_timeout_seconds", connect_timeout_seconds)
            or DEFAULT_CONNECT_TIMEOUT_SECONDS
        )
        self.request_timeout_seconds = _check_timeout(
            "request_timeout_seconds", request_timeout_seconds
        )
        if max_message_bytes is not None and (
            isinstance(max_message_bytes, bool)
            or not isinstance(max_message_bytes, int)
            or max_message_bytes < 1
        ):
            raise ValueError(f"max_message_bytes must be an int >= 1, got {max_message_bytes!r}")
        self.max_message_bytes = max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        self._lock = threading.Lock()
        self._conns: dict[str, Connection] = {}
        self._spare: Connection | None = None  # opened for metadata, not used for inference yet
        self._metadata: dict[str, Any] | None = None
        self._mapper: ObservationMapper | None = None
        self._actions = _ActionCheck(None)
        # obs_map is this model's adapter: the session hands it the env's own values (an env
        # that publishes adapter tags is read through them by obs_map's role entries)
        super().__init__(spec=NO_ADAPTER)

    # -- the corner -----------------------------------------------------------------------

    def predict_chunk(
        self, observation: Any, execution_horizon: int = 1, context: Any = None
    ) -> Any:
        """Ask the server: one observation -> ``[H, ...]`` actions (the whole chunk it sends)."""
        mapper = self._mapper
        if mapper is None:  # used outside a session: the default map, the client's prompt
            mapper = self._mapper = compile_obs_map(self.obs_map, None, prompt=self.prompt)
        episode = "" if context is None else str(context.get("episode_id", ""))
        request = mapper(observation)
        conn = self._connection(episode)
        try:
            reply = conn.infer(request)
        except Exception:
            self._forget(episode, conn)  # a failed connection is not used again
            raise
        return self._actions(reply)

    def predict(self, observation: Any, context: Any = None) -> Any:
        """Ask the server, run its first action (``execution_horizon=1``)."""
        return self.predict_chunk(observation, 1, context)[0]

    def predict_chunk_batch(
        self, observations: Any, execution_horizon: int = 1, context: Any = None
    ) -> Any:
        """A vector env's lanes: one request per lane, each on its lane's connection, all
        sent before any reply is read (the server answers them side by side)."""
        contexts = list(context) if context is not None else None
        n = len(contexts) if contexts is not None else len(_first_leaf(observations))
        lanes = self._bridge.tree_unstack(observations, n)
        mapper = self._mapper
        if mapper is None:
            mapper = self._mapper = compile_obs_map(self.obs_map, None, prompt=self.prompt)
        requests = [mapper(obs) for obs in lanes]
        episodes = [
            f"lane-{i}" if contexts is None else str(contexts[i].get("episode_id", f"lane-{i}"))
            for i in range(n)
        ]
        conns = [self._connection(e) for e in episodes]
        chunks = []
        try:
            for conn, request in zip(conns, requests):
                conn.send(request)
            for conn in conns:
                chunks.append(self._actions(conn.receive()))
        except Exception:
            for episode, conn in zip(episodes, conns):
                self._forget(episode, conn)  # the lanes' replies are out of step now
            raise
        if len({c.shape for c in chunks}) > 1:
            raise ShapeMismatch(
                f"the openpi server answered chunks of different lengths for one step's lanes: "
                f"{[list(c.shape) for c in chunks]}",
                key=ACTIONS_KEY,
                expected="one [H, ...] for every lane",
                actual=str([list(c.shape) for c in chunks]),
            )
        return np.stack(chunks)

    # -- binding and episodes -------------------------------------------------------------

    def _on_bind(self, contract: Any, *, instruction: str | None, lanes: int) -> None:
        prompt = instruction if instruction is not None else self.prompt
        self._mapper = compile_obs_map(self.obs_map, contract, prompt=prompt)
        self._actions = _ActionCheck(getattr(contract, "action_space", None))

    def on_episode_end(self, episode_id: str = "") -> None:
        """Close the episode's connection (the next episode opens a fresh one)."""
        with self._lock:
            conn = self._conns.pop(episode_id, None)
        if conn is not None:
            conn.close()

    def _connection(self, episode: str) -> Connection:
        with self._lock:
            conn = self._conns.get(episode)
            if conn is None and self._spare is not None:
                conn, self._spare = self._spare, None
                self._conns[episode] = conn
        if conn is None:
            conn = self._dial()
            with self._lock:
                self._conns[episode] = conn
        return conn

    def _dial(self) -> Connection:
        token = resolve_token(self._token)
        conn = Connection(
            self.url,
            connect_timeout_seconds=self.connect_timeout_seconds,
            request_timeout_seconds=self.request_timeout_seconds,
            max_message_bytes=self.max_message_bytes,
            headers={"Authorization": f"Bearer {token}"} if token else None,
            ssl_context=client_context(self._tls_ca) if self.url.startswith("wss://") else None,
        )
        self._metadata = conn.metadata
        return conn

    def _forget(self, episode: str, conn: Connection) -> None:
        with self._lock:
            if self._conns.get(episode) is conn:
                del self._conns[episode]
        conn.close()

    # -- what a user reads ----------------------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """The server's metadata, as it sent it on connect (connects once if nothing has yet).

        Raises:
            ConnectFailed: the server cannot be reached.
        """
        if self._metadata is None:
            conn = self._dial()
            with self._lock:
                spare, self._spare = self._spare, conn
            if spare is not None:
                spare.close()
        assert self._metadata is not None
        return self._metadata

    @property
    def observation_keys(self) -> list[str]:
        """The keys each request carries, once bound to an env (``[]`` before)."""
        return [] if self._mapper is None else list(self._mapper.keys)

    def _release(self) -> None:
        """``close()``: close every connection this client holds."""
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
            spare, self._spare = self._spare, None
        for conn in [*conns, *([spare] if spare is not None else [])]:
            conn.close()

    def __reduce__(self) -> Any:
        """Pickle the settings only (``workers=``): each worker dials its own connections."""
        kwargs = {
            "obs_map": self.obs_map,
            "prompt": self.prompt,
            "connect_timeout_seconds": self.connect_timeout_seconds,
            "request_timeout_seconds": self.request_timeout_seconds,
            "max_message_bytes": self.max_message_bytes,
            "token": self._token,  # the user's own: a worker dials with it
            "tls_ca": self._tls_ca,
        }
        return (_rebuild, (self.url, kwargs))

    def __repr__(self) -> str:
        return f"PolicyClient({self.url!r})"


def _first_leaf(tree: Any) -> Any:
    while isinstance(tree, Mapping):
        tree = next(iter(tree.values()))
    return tree


def _rebuild(url: str, kwargs: dict[str, Any]) -> PolicyClient:
    return PolicyClient(url, **kwargs)
