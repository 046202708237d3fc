"""``ModelServer``: serve an ``rlmesh.Model`` to ``rlmesh.RemoteModel`` clients (MOD-31..36).

The same session protocol as env endpoints, with the ``model`` service. A client
binds the model to an env by sending the env's contract; the server resolves the
model's adapter from it *here* (so the adapter's state and any frame stacks live
next to the model) and answers each ``Predict`` carrying a raw env observation with
an env-ready action. Episode boundaries travel as ``BeginEpisode`` / ``EndEpisode``,
so the model's ``on_episode_end`` fires for every episode — including the one in
flight when a client disconnects.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .._build import EDITION_BASE, resolve_declared_edition
from .._contract import EnvContract, check_bound_size
from .._plan import ValuePlan, value_plan
from ..errors import BindFailed
from ..models._base import check_device, declared_spec
from ..models._route import LocalRoute, probe_hidden_state
from ..openpi._server import OpenPILoop
from ..spaces import space_from_spec
from ..transport import resolve_address
from ..transport.tls import server_context
from ..wire import frames, messages as m
from ..wire.meta import normalize
from ._auth import check_exposure
from ._driver import RequestFailed
from ._lifecycle import ServerBase
from ._loop import ServeLoop
from ._metrics import Meter, observe_predict
from ._model_sessions import ModelSessionsLoop
from ._options import ServeOptions

__all__ = ["ModelServer"]

log = logging.getLogger("rlmesh.serve")


class _BoundEnv:
    """What a local route's ``bind`` reads: the contract and the per-lane action space."""

    def __init__(self, contract: EnvContract) -> None:
        self.contract = contract
        self.action_space = space_from_spec(contract.action_space)
        self.single_action_space = self.action_space
        self.num_envs = contract.num_envs
        self.is_vector = False


class _ModelService:
    """Runs one bound model per session: one local route per lane."""

    service = "model"
    component = "rlmesh-model"

    def __init__(self, model: Any, declared: str | None, meter: Meter | None = None) -> None:
        self.model = model
        self.declared_edition = declared
        self.meter = meter  # metrics on: predict durations and batch sizes
        self.routes: list[Any] = []
        self.open: dict[int, str] = {}  # lane -> episode in flight
        self.obs_plan: ValuePlan | None = None  # the bound env's value plans
        self.act_plan: ValuePlan | None = None
        self.bound_key = (
            ""  # the bound observation space (sessions with equal keys may share a forward)
        )
        self._contract = _model_contract(model)
        # The model service's requests (Configure, Close, Ping... are the loop's own).
        self._handlers: dict[int, Any] = {
            m.Predict.KIND: self._predict,
            m.BeginEpisode.KIND: self._begin_episode,
            m.EndEpisode.KIND: self._end_episode,
            m.Bind.KIND: self._bind,
        }

    def contract(self) -> dict[str, Any]:
        return self._contract

    def begin_session(self) -> None:
        self.routes = []
        self.open = {}

    def end_session(self) -> list[m.EpisodeRecord]:
        """A session that ends mid-episode still ends that episode for the model."""
        for lane, episode_id in list(self.open.items()):
            try:
                self.routes[lane].end_episode(episode_id)
            except Exception:
                log.exception("on_episode_end failed while a model session ended")
        self.open = {}
        for route in self.routes:
            try:
                route.close()
            except Exception:
                log.exception("closing a model route failed")
        self.routes = []
        return []

    def handle(self, msg: Any, frame: frames.Frame) -> tuple[Any, list[Any]]:
        handler = self._handlers.get(msg.KIND)
        if handler is None:
            raise RequestFailed(
                "UNSUPPORTED", f"a model endpoint does not answer {type(msg).__name__}"
            )
        reply: tuple[Any, list[Any]] = handler(msg, frame)
        return reply

    def _begin_episode(self, msg: m.BeginEpisode, frame: frames.Frame) -> tuple[Any, list[Any]]:
        route = self._route(msg.lane)
        if msg.lane in self.open:  # a new episode closes an unfinished one
            route.end_episode(self.open.pop(msg.lane))
        self._call("reset", route.begin_episode, msg.episode_id, msg.seed)
        self.open[msg.lane] = msg.episode_id
        return m.EpisodeAck(episode_id=msg.episode_id), []

    def _end_episode(self, msg: m.EndEpisode, frame: frames.Frame) -> tuple[Any, list[Any]]:
        route = self._route(msg.lane)
        if self.open.get(msg.lane) == msg.episode_id:
            del self.open[msg.lane]
            self._call("episode_end", route.end_episode, msg.episode_id)
        return m.EpisodeAck(episode_id=msg.episode_id), []

    def _bind(self, msg: m.Bind, frame: frames.Frame) -> tuple[m.BindReply, list[Any]]:
        if self.routes:
            self.end_session()
        if msg.execution_horizon < 1 or msg.lanes < 1:
            raise RequestFailed(
                "INVALID_ACTION", "bind: execution_horizon and lanes must be >= 1", op="bind"
            )
        try:
            contract = EnvContract.from_dict(msg.contract)
            # issue 28: lanes and bytes are checked before one route is built
            check_bound_size(
                contract.observation_space, contract.action_space, msg.lanes, "the Bind"
            )
        except ValueError as exc:
            raise RequestFailed(
                "INVALID_ACTION", f"bind: the env contract is invalid: {exc}", op="bind"
            ) from None
        env = _BoundEnv(contract)
        routes = []
        for _ in range(msg.lanes):
            route = LocalRoute(
                self.model,
                instruction=None,
                trust_entrypoints=None,  # the served model's own setting; a client's value is ignored (CNF2-A5)
                execution_horizon=msg.execution_horizon,
            )
            self._call("bind", route.bind, env)
            routes.append(route)
        if msg.lanes > 1:  # MOD-37: the lanes share this one model object
            self._call("bind", probe_hidden_state, routes[0], contract.observation_space)
        self.routes = routes
        self.obs_plan = value_plan(contract.observation_space)
        self.act_plan = value_plan(contract.action_space)
        self.bound_key = (
            repr(msg.contract.get("observation_space")) if isinstance(msg.contract, dict) else ""
        )
        adapter = routes[0].adapter
        text = (
            adapter.describe()
            if adapter is not None and callable(getattr(adapter, "describe", None))
            else None
        )
        return m.BindReply(
            horizon=routes[0].horizon, adapter=text, spec_less=routes[0].spec_less
        ), []

    def _predict(self, msg: m.Predict, frame: frames.Frame) -> tuple[m.PredictReply, list[Any]]:
        route = self._route(msg.lane)
        assert self.obs_plan is not None and self.act_plan is not None
        try:
            obs = self.obs_plan.join(msg.obs, frame.segments)
        except Exception as exc:
            raise RequestFailed(
                "INVALID_ACTION",
                f"predict: observation does not match the contract: {exc}",
                op="predict",
            ) from None
        meter = self.meter
        if meter is None:
            action = self._call("predict", route.predict, obs)
        else:
            started = time.perf_counter_ns()
            action = self._call("predict", route.predict, obs)
            observe_predict(meter, time.perf_counter_ns() - started, 1)
        try:
            scalars, segments = self.act_plan.pack(action)
        except (ValueError, TypeError, KeyError) as exc:
            raise RequestFailed(
                "INTERNAL",
                f"predict failed: the model's action does not match the env's action_space at {exc}",
                op="predict",
                recoverable=False,
            ) from None
        return m.PredictReply(action=scalars), segments

    def _route(self, lane: int) -> Any:
        if not self.routes:
            raise RequestFailed(
                "NOT_READY", "the model is not bound to an env yet; send Bind first", op="predict"
            )
        if not 0 <= lane < len(self.routes):
            raise RequestFailed(
                "INVALID_ACTION", f"lane must be in [0, {len(self.routes)}), got {lane}"
            )
        return self.routes[lane]

    @staticmethod
    def _call(op: str, fn: Any, *args: Any) -> Any:
        """Model failures end the session with the ERR-2 message (``model error: ...``)."""
        try:
            return fn(*args)
        except RequestFailed:
            raise
        except Exception as exc:
            recoverable = isinstance(exc, ValueError) and op == "bind"
            raise RequestFailed(
                "INVALID_ACTION" if recoverable else "INTERNAL",
                f"{op} failed: {type(exc).__name__}: {exc}",
                op=op,
                recoverable=recoverable,
            ) from None


def _model_contract(model: Any) -> dict[str, Any]:
    """What ``Welcome`` publishes about the model, computed once when the server is built.

    A spec that cannot travel (a ``Custom`` input holds host code, ADP-48) is published as
    ``spec: None`` with a note: clients never need it (the adapter is resolved here, next
    to the model), and the server must not fail at every ``Hello`` (issue 18, defect 4).
    """

    name = type(model).__name__
    spec = declared_spec(model)
    to_dict = getattr(spec, "to_dict", None)
    if not callable(to_dict):
        return {"model": name, "spec": None}
    try:
        return {"model": name, "spec": normalize(to_dict())}
    except (ValueError, TypeError) as exc:
        log.info("the model spec does not travel (%s); publishing it as spec=None", exc)
        return {"model": name, "spec": None, "spec_note": f"the model spec does not travel: {exc}"}


class ModelServer(ServerBase):
    """Serve a model over TCP or a Unix socket for :class:`rlmesh.RemoteModel` clients.

    Args:
        model: An ``rlmesh.Model`` (or numpy flavour) instance.
        address: Where to listen (``host:port``, ``tcp://…``, ``unix:///…``; ``None`` = port 0).
        options: :class:`ServeOptions` (timeouts, remote shutdown, edition).
        close_model_on_shutdown: Call ``model.close()`` when serving ends.
        sessions: Serve up to this many clients at once on this one loaded model, each
            with its own bind, episodes and per-episode context (default 1). They share
            the serving thread; see ``fuse``.
        fuse: With ``sessions > 1``, answer ``Predict`` requests that arrive together
            from several sessions with one call of the model's ``predict_batch`` (when
            it defines one); ``False`` serves every request in turn.
        protocol: ``"rlmesh"`` (the default: rlmesh's own wire, for ``RemoteModel``) or
            ``"openpi"``: openpi's WebSocket policy-server wire on ``host:port`` (also
            written ``ws://host:port``), for ``openpi-client`` and
            ``rlmesh.openpi.PolicyClient``; ``address`` then reports ``ws://host:port``,
            each connection is one episode and ``sessions`` caps the connections served
            at once (docs/openpi.md). Needs the ``openpi`` extra.
        execution_horizon: ``protocol="openpi"`` only: the chunk length each reply
            carries for a chunk model (default: its ``native_chunk``, else 1).
    """

    def __init__(
        self,
        model: Any,
        address: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
        options: ServeOptions | None = None,
        close_model_on_shutdown: bool = True,
        sessions: int = 1,
        fuse: bool = True,
        protocol: str = "rlmesh",
        execution_horizon: int | None = None,
    ) -> None:
        self._kind = "ModelServer"
        if protocol not in ("rlmesh", "openpi"):
            raise ValueError(f"protocol must be 'rlmesh' or 'openpi', got {protocol!r}")
        if execution_horizon is not None and protocol != "openpi":
            raise ValueError(
                "execution_horizon= is for protocol='openpi'; an rlmesh client sends its own"
            )
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
            raise ValueError(f"sessions must be an int >= 1, got {sessions!r}")
        if not callable(getattr(model, "_fire_episode_end", None)):
            raise TypeError(
                f"ModelServer serves rlmesh.Model instances, got {type(model).__name__}"
            )
        check_device(model)  # MOD-26
        self._options = options or ServeOptions()
        self.model = model
        if protocol == "openpi":
            self._init_openpi(
                address, host, port, sessions, execution_horizon, close_model_on_shutdown
            )
            return
        declared = resolve_declared_edition(
            served=self._options.workflow_edition,
            class_attr=getattr(type(model), "workflow_edition", None),
            warn=True,
            who="this served model",
            hint=(
                f'a `workflow_edition = "{EDITION_BASE}"` attribute on your Model subclass, '
                f'options=rlmesh.ServeOptions(workflow_edition="{EDITION_BASE}")'
            ),
        )
        listener, unix_path = self._bind(address, host, port, path, transport)
        # metrics on: one meter for the endpoint, shared by its sessions' services
        meter = Meter("model") if self._options.metrics_address is not None else None
        loop: ServeLoop
        if sessions == 1:
            loop = ServeLoop(listener, _ModelService(model, declared, meter), self._options)
        else:  # issue 25: N sessions on this one model, fused forwards where the model batches
            loop = ModelSessionsLoop(
                listener,
                lambda: _ModelService(model, declared, meter),
                self._options,
                sessions=sessions,
                fuse=bool(fuse),
            )
        loop._meter = meter
        self._loop = loop
        self._init_lifecycle(loop, model.close, close_model_on_shutdown, unix_path)

    def _init_openpi(
        self,
        address: str | None,
        host: str | None,
        port: int | None,
        sessions: int,
        execution_horizon: int | None,
        close_model_on_shutdown: bool,
    ) -> None:
        """``protocol="openpi"``: the same lifecycle around the openpi wire's loop (rlmesh.openpi)."""
        if isinstance(address, str) and address.startswith(("ws://", "wss://")):
            address = address.split("://", 1)[1]
        addr = resolve_address(address, host=host, port=port, bind=True)
        if addr.transport != "tcp" or addr.tls:
            raise ValueError(
                f"protocol='openpi' serves on TCP (ws://host:port), got {addr.url}; pass host:port"
            )
        check_exposure(addr, self._options, who="ModelServer(protocol='openpi')")
        k = getattr(self.model, "native_chunk", None)
        horizon = execution_horizon if execution_horizon is not None else (k or 1)
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"execution_horizon must be an int >= 1, got {horizon!r}")
        metadata = {
            **_model_contract(self.model),
            "execution_horizon": horizon,
            "protocol": "openpi",
        }
        opts = self._options
        ctx = (
            server_context(opts.tls_cert, opts.tls_key, opts.tls_client_ca)
            if opts.tls_cert and opts.tls_key
            else None
        )
        try:
            loop = OpenPILoop(
                self.model,
                addr.host,
                addr.port,
                metadata=metadata,
                sessions=sessions,
                execution_horizon=horizon,
                idle_timeout_seconds=opts.idle_timeout_seconds,
                token=opts.token,
                ssl_context=ctx,
                metrics=opts.metrics_address is not None,
            )
        except OSError as exc:
            raise BindFailed(f"failed to bind {addr.url}: {exc}") from exc
        host_text = f"[{loop.host}]" if ":" in loop.host else loop.host
        self._address = f"{'wss' if ctx is not None else 'ws'}://{host_text}:{loop.port}"
        self._init_lifecycle(loop, self.model.close, close_model_on_shutdown, None)
