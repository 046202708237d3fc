"""``RemoteModel``: drive an already-served model against any env (MOD-40..45, DELTA-50).

At bind, the env's contract goes to the model server, which resolves the model's
adapter there; every step sends the raw observation and receives an env-ready
action; episode boundaries are sent so the served model's ``on_episode_end``
fires (the reference never fires it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .._build import resolve_declared_edition
from .._contract import EnvContract
from .._metadata import sanitize_metadata
from .._plan import value_plan
from .._token import check_token
from ..errors import (
    AdapterResolutionError,
    EnvironmentException,
    HandshakeError,
    ModelError,
    RequestTimeout,
)
from ..models._values import to_numpy_tree
from ..transport import resolve_address
from ..wire import messages as m
from ..wire.meta import normalize
from ._dial import check_timeout
from ._session import ClientSession

__all__ = ["RemoteModel", "RemoteRoute"]

log = logging.getLogger("rlmesh.client")


class RemoteRoute:
    """A session route that asks a model server for each action (same methods as local routes)."""

    spec_less = True

    def __init__(
        self, handle: RemoteModel, *, execution_horizon: int, workflow_edition: str | None
    ) -> None:
        self.handle = handle
        self.horizon = execution_horizon
        self.requested_horizon = execution_horizon
        self.declared = workflow_edition
        self.session: ClientSession | None = None
        self.adapter_description: str | None = None
        self.lane_episode: dict[int, str] = {}
        self._obs_pack: Any = None  # value plans, built at bind
        self._act_unpack: Any = None

    # -- binding --------------------------------------------------------------------------

    def bind(self, conn: Any, *, lanes: int = 1) -> None:
        contract = conn.contract
        if not isinstance(contract, EnvContract):
            raise TypeError(
                "a served model needs an env whose spaces convert to rlmesh spaces; this env's "
                f"contract is {type(contract).__name__}"
            )
        obs_spec, act_spec = contract.observation_space, contract.action_space
        payload = contract.to_dict()
        if payload.get("metadata") is not None:
            try:
                payload["metadata"] = normalize(payload["metadata"])
            except TypeError:
                payload["metadata"] = sanitize_metadata(payload["metadata"])
        self.session = self.handle._dial(self.declared)
        if self.session.welcome.service != "model":
            raise HandshakeError(f"'{self.handle.address}' is not a model endpoint")
        selected = self.session.welcome.selected
        env_edition = getattr(conn, "selected_workflow_edition", None)
        edition = selected if not isinstance(env_edition, str) else min((selected, env_edition))
        try:
            reply, _ = self._request(
                m.Bind(
                    contract=payload,
                    edition=edition,
                    execution_horizon=self.requested_horizon,
                    lanes=lanes,  # trust_entrypoints is never forwarded: the server owns its adapter (CNF2-A5)
                )
            )
        except ModelError as exc:
            self.close()
            if "AdapterResolutionError:" in str(
                exc
            ):  # the model's spec and the env's tags do not pair
                raise AdapterResolutionError(
                    str(exc).split("AdapterResolutionError: ", 1)[1]
                ) from None
            raise
        self.horizon = reply.horizon
        self.spec_less = reply.spec_less
        self.adapter_description = reply.adapter
        self._obs_pack = value_plan(obs_spec).pack
        self._act_unpack = value_plan(act_spec).unpack

    # -- episodes ---------------------------------------------------------------------------

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        self._request(m.BeginEpisode(episode_id=episode_id, seed=seed, lane=lane))
        self.lane_episode[lane] = episode_id

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        if self.lane_episode.get(lane) == episode_id:
            del self.lane_episode[lane]
        self._request(m.EndEpisode(episode_id=episode_id, lane=lane))

    # -- per step ---------------------------------------------------------------------------

    def predict(self, observation: Any) -> Any:
        return self.predict_lane(observation, 0)

    def predict_lane(self, observation: Any, lane: int) -> Any:
        """One raw env observation of one lane -> the env-ready action for it."""
        assert self._obs_pack is not None and self._act_unpack is not None
        scalars, segments = self._obs_pack(to_numpy_tree(observation))
        reply, frame = self._request(m.Predict(obs=scalars, lane=lane), segments)
        return self._act_unpack(reply.action, frame.segments)

    def _request(self, msg: Any, segments: Sequence[Any] = ()) -> tuple[Any, Any]:
        if self.session is None:
            raise ModelError(
                "the served model is not bound to an env yet; open a session (RemoteModel.session(env)) "
                "before predicting",
                code="NOT_READY",
                recoverable=True,
            )
        try:
            return self.session.request(
                msg, list(segments), timeout=self.handle.request_timeout_seconds
            )
        except EnvironmentException as exc:  # MOD-38: a served handler failure
            raise ModelError(
                f"model error: {exc.message}", code=exc.code, recoverable=exc.recoverable
            ) from exc
        except RequestTimeout as exc:
            raise RequestTimeout(
                f"remote model request timed out after {exc.timeout_seconds:.3f}s",
                timeout_seconds=exc.timeout_seconds,
            ) from None

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close("session closed")


class RemoteModel:
    """Connect to an already-served model and drive it against an env.

    Construction does not dial; ``session()`` / ``run()`` do, once per session (the
    model endpoint admits one session at a time). A served model resolves its own
    adapter from the env's contract and rejects ``instruction=``.

    Args:
        address: The model endpoint (``host:port``, ``tcp://…``, ``unix:///…``).
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None``: wait forever).
        token: The model endpoint's token (docs/security.md); ``None``: ``$RLMESH_TOKEN``
            where a session dials, else none. It travels with the handle (``workers=`` runs).
        tls_ca: For a ``tls://host:port`` address: the PEM CA bundle to trust; ``None``:
            ``$RLMESH_TLS_CA``, else the system store.

    Example:
        >>> import rlmesh
        >>> from rlmesh.numpy import Model
        >>> server = rlmesh.serve.ModelServer(Model(lambda obs: 0), "127.0.0.1:0").start()
        >>> import gymnasium as gym
        >>> result = rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[0])
        >>> result.num_episodes
        1
        >>> server.shutdown()
    """

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
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        if address is not None and any(h is not None for h in (host, port, path, transport)):
            raise ValueError(
                "address cannot be combined with the host/port/path/transport helpers; pass one or the other"
            )
        self._addr = resolve_address(
            address, host=host, port=port, path=path, transport=transport, bind=False
        )
        # DELTA-23 / CNF2-B7: an explicit address is reported as requested; helpers render as a URL.
        self._requested = address if isinstance(address, str) else None
        self.connect_timeout_seconds = check_timeout(
            "connect_timeout_seconds", connect_timeout_seconds
        )
        self.request_timeout_seconds = check_timeout(
            "request_timeout_seconds", request_timeout_seconds
        )
        self._token = check_token(token)
        self._tls_ca = tls_ca

    @property
    def token(self) -> str | None:
        """The token this handle sends (``None``: ``$RLMESH_TOKEN`` where it dials, else none)."""
        return self._token

    @property
    def address(self) -> str:
        """The endpoint as requested (``"127.0.0.1:5556"`` stays so); helpers give ``tcp://host:port``."""
        return self._requested if self._requested is not None else self._addr.url

    def _dial(self, declared: str | None) -> ClientSession:
        """Connect to the model endpoint (the session words its failures for a model)."""
        return ClientSession.connect(
            self._addr,
            service="model",
            component="rlmesh-runtime",
            declared=resolve_declared_edition(declared),
            connect_timeout=self.connect_timeout_seconds,
            request_timeout=self.request_timeout_seconds,
            noun="a model",
            token=self._token,
            tls_ca=self._tls_ca,
        )

    def session(
        self,
        env: Any,
        *,
        instruction: str | None = None,
        close_env: bool = False,
        trust_entrypoints: bool | None = None,
        execution_horizon: int = 1,
        view: Any = None,
        workflow_edition: str | None = None,
    ) -> Any:
        """Bind the served model to ``env`` (an env, factory, client or address) and return a Session."""
        from ..eval import _api  # porch: sessions sit above the client

        return _api.served_session(
            self,
            env,
            instruction=instruction,
            close_env=close_env,
            trust_entrypoints=trust_entrypoints,
            execution_horizon=execution_horizon,
            view=view,
            workflow_edition=workflow_edition,
        )

    def run(self, env: Any, **kwargs: Any) -> Any:
        """``rlmesh.run(self, env, **kwargs)``: drive whole episodes and return a RunResult."""
        from ..eval import _api  # porch: sessions sit above the client

        return _api.run(self, env, **kwargs)

    def __repr__(self) -> str:
        return f"RemoteModel(address='{self.address}')"
