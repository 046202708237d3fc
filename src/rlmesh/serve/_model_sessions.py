"""Many sessions on one loaded model: ``ModelServer(model, sessions=N)`` (issue 25).

A model server loads its weights once, so its sessions cannot live in separate
processes the way env sessions do. They share the serving thread instead: the
loop admits up to N sessions, each with its own bind (routes, adapters, value
plans), its own episodes and per-episode context, and its own ``on_episode_end``
edges. Every session's requests run on this one thread, so the model is never
called concurrently.

*Fusion across sessions*: ``Predict`` requests that arrive in the same poll round
from several sessions bound to the same observation space are answered with **one**
call of the model's batched corner (``predict_batch``) when the model defines one and
each of those sessions is at a plain step (execution horizon 1, no chunk frames
queued): the observations go
through each session's own adapter, are stacked, forwarded once, split, and each
action goes back through its session's adapter. Otherwise (no batched corner,
chunked replay, one request alone) the requests are served in turn, each with the
model's ``predict``. While one forward runs, the other sessions' requests wait in
their sockets, so under load the next round finds them together: a slow forward
fuses more. ``fuse=False`` serves every request in turn.

Sessions of a multi-session model endpoint stay on their sockets (no
shared-memory rings: the loop would have to poll N rings).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from ..errors import ProtocolException
from ..wire import frames, messages as m
from ._driver import RequestFailed
from ._loop import ServeLoop, _Peer
from ._loop_requests import _describe
from ._metrics import observe_predict
from ._options import ServeOptions

__all__ = ["ModelSessionsLoop"]

log = logging.getLogger("rlmesh.serve")


def _fusable(svc: Any, msg: m.Predict) -> Any:
    """The route a ``Predict`` would use if it can join a fused batch, else ``None``."""
    routes = svc.routes
    if not routes or not 0 <= msg.lane < len(routes) or svc.obs_plan is None:
        return None
    route = routes[msg.lane]
    cs = route.corners
    if (
        cs.predict_batch is None
        or "predict_batch" in cs.dechunked
        or route.chunk_mode
        or route.queue
        or route._pending is not None
        or route.prefetch_lead
    ):
        return None
    return route


class _Failure:
    """A member's own error from a fused forward that was split until it stood alone."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class ModelSessionsLoop(ServeLoop):
    """The serve loop with up to ``sessions`` active sessions sharing one model (see the module docstring)."""

    def __init__(
        self,
        listener: socket.socket,
        make_service: Callable[[], Any],
        options: ServeOptions,
        *,
        sessions: int,
        fuse: bool = True,
    ) -> None:
        super().__init__(listener, make_service(), options)
        self._make_service = make_service
        self.limit = sessions
        self.fuse = fuse
        self._sessions: dict[_Peer, Any] = {}
        self._queued: list[tuple[_Peer, Any, m.Predict, frames.Frame, int]] = []
        self.fused_batches = (
            0  # forwards that served more than one session (for tests and benchmarks)
        )
        self.fused_requests = 0

    # -- dispatch -------------------------------------------------------------------------

    def _request(self, peer: _Peer, msg: Any, frame: frames.Frame, rid: int) -> None:
        svc = self._sessions.get(peer)
        if svc is None:  # pragma: no cover - the state table prevents this
            self._protocol_error(peer, ProtocolException("request outside a session"), rid)
            return
        if self.fuse and type(msg) is m.Predict:
            self._queued.append((peer, svc, msg, frame, rid))  # answered after this poll round
            return
        self._serve_one(peer, svc, msg, frame, rid)

    def _answer_queued(self) -> None:
        """Answer this round's ``Predict`` requests: one fused forward per group of sessions bound
        to the same observation space, the rest in turn."""
        queued, self._queued = self._queued, []
        groups: dict[str, list[tuple[_Peer, Any, m.Predict, frames.Frame, int, Any, Any]]] = {}
        rest: list[tuple[_Peer, Any, m.Predict, frames.Frame, int]] = []
        for item in queued:
            peer, svc, msg, frame, rid = item
            if peer.conn.closed or peer not in self._sessions or self._sessions[peer] is not svc:
                continue
            route = _fusable(svc, msg) if len(queued) > 1 else None
            obs = None
            if route is not None:
                try:
                    obs = svc.obs_plan.join(msg.obs, frame.segments)
                except Exception:
                    route = None  # the session's own path words the error
            if route is None:
                rest.append(item)
            else:
                groups.setdefault(svc.bound_key, []).append(
                    (peer, svc, msg, frame, rid, route, obs)
                )
        for group in groups.values():
            if len(group) >= 2:
                self._fused(group)
            else:
                rest.append(group[0][:5])
        for peer, svc, msg, frame, rid in rest:
            if not peer.conn.closed and self._sessions.get(peer) is svc:
                self._serve_one(peer, svc, msg, frame, rid)

    def _fused(
        self, group: list[tuple[_Peer, Any, m.Predict, frames.Frame, int, Any, Any]]
    ) -> None:
        """One batched forward for the whole group (sessions bound to the same observation space).

        Each session's adapter sees its observation and its context counts the predict once,
        here. When the forward raises, the group is split in halves and each half forwarded
        again, down to single sessions, which go through the model's ``predict`` as they would
        in turn: only a session whose own input fails gets the error (and its session ends,
        as in turn); the others get their actions.
        """
        route0 = group[0][5]
        cs, bridge = route0.corners, route0.bridge
        wants = route0.cs_wants(False, True)
        members = []
        for item in group:
            peer, _svc, _msg, _frame, rid, route, obs = item
            try:
                x = route.model_input(obs)
                ctx = route.store.next(route.episode_id) if wants else None
            except Exception as exc:  # this session's own input (its adapter said no)
                self._predict_failed(peer, rid, exc)
                continue
            members.append((item, x, ctx))
        results = self._forward(cs, bridge, members, wants)
        for (item, _x, _ctx), out in zip(members, results):
            peer, svc, _msg, _frame, rid, route, _obs = item
            if isinstance(out, _Failure):
                self._predict_failed(peer, rid, out.exc)
                continue
            try:
                action = route.env_action(out)
                scalars, segments = svc.act_plan.pack(action)
            except Exception as exc:
                failure = RequestFailed(
                    "INTERNAL",
                    f"predict failed: the model's action does not match the env's action_space at {exc}",
                    op="predict",
                    recoverable=False,
                )
                self._send(peer, failure.to_message(), rid)
                self._end_active(peer)
                continue
            self._send(peer, m.PredictReply(action=scalars), rid, segments)
        self._touch()

    def _forward(self, cs: Any, bridge: Any, members: list[Any], wants: bool) -> list[Any]:
        """The model's output for each member, or a :class:`_Failure` holding its own error."""
        if not members:
            return []
        if len(members) == 1:  # alone: the model's predict, as in turn
            (item, x, ctx) = members[0]
            route = item[5]
            if route.cs_wants(False, False):
                ctx = ctx if wants else route.store.next(route.episode_id)
            else:
                ctx = None
            meter = self._meter
            started = time.perf_counter_ns() if meter is not None else 0
            try:
                one = cs.predict(x, ctx)
            except Exception as exc:
                return [_Failure(exc)]
            if meter is not None:  # metrics on: one forward of one observation
                observe_predict(meter, time.perf_counter_ns() - started, 1)
            return [one]
        try:
            meter = self._meter
            started = time.perf_counter_ns() if meter is not None else 0
            batch = bridge.tree_stack([x for _item, x, _ctx in members])
            out = cs.predict_batch(batch, [ctx for *_r, ctx in members] if wants else None)
            outs = list(bridge.tree_unstack(out, len(members)))
            if meter is not None:  # metrics on: one forward of len(members) observations
                observe_predict(meter, time.perf_counter_ns() - started, len(members))
            if len(outs) != len(members):
                raise ValueError(f"predict_batch returned {len(outs)} rows for {len(members)}")
        except Exception as exc:
            log.info(
                "a fused forward over %d sessions failed (%s); forwarding them in halves",
                len(members),
                _describe(exc),
            )
            half = len(members) // 2
            return self._forward(cs, bridge, members[:half], wants) + self._forward(
                cs, bridge, members[half:], wants
            )
        self.fused_batches += 1
        self.fused_requests += len(members)
        return outs

    def _predict_failed(self, peer: _Peer, rid: int, exc: BaseException) -> None:
        """A model error for this session (the words of the in-turn path); its session ends."""
        failure = RequestFailed(
            "INTERNAL", f"predict failed: {_describe(exc)}", op="predict", recoverable=False
        )
        self._send(peer, failure.to_message(), rid)
        self._end_active(peer)

    # -- sessions -------------------------------------------------------------------------

    @property
    def in_use(self) -> int:
        return len(self._sessions)

    def _ping(self, peer: _Peer, msg: m.Ping, rid: int) -> None:
        full = len(self._sessions) >= self.limit and peer not in self._sessions
        self._send(
            peer, self._pong("busy" if full else "ready", len(self._sessions), self.limit), rid
        )

    def _hello(self, peer: _Peer, hello: m.Hello, rid: int) -> None:
        if len(self._sessions) >= self.limit:
            self._send(
                peer,
                m.Busy(
                    message=f"all {self.limit} sessions of this model endpoint are in use (sessions={self.limit}); "
                    "close another client or serve more sessions (--sessions)"
                ),
                rid,
            )
            self._drop(peer)
            return
        # no shared-memory rings: this loop serves many sockets
        answer = self._welcome(peer, hello, rid, None)
        if answer is None:
            return
        svc = self._make_service()
        svc.begin_session()
        self._sessions[peer] = svc
        peer.conn.limits = self.limits
        self._send(peer, answer, rid)

    def _close(self, peer: _Peer, msg: m.Close, rid: int) -> None:
        svc = self._sessions.pop(peer, None)
        records = svc.end_session() if svc is not None else []
        self._send(peer, m.CloseReply(final_episodes=records), rid)
        self._drop(peer)
        self._touch()

    def _end_active(self, peer: _Peer, *, already_ended: bool = False) -> None:
        svc = self._sessions.pop(peer, None)
        if svc is not None and not already_ended:
            self._end_service(svc)
        self._drop(peer)

    @staticmethod
    def _end_service(svc: Any) -> None:
        try:
            svc.end_session()  # SES-5: an abrupt end still ends the episode in flight for the model
        except Exception:  # pragma: no cover - bookkeeping only
            log.exception("ending a model session failed")

    def _drop(self, peer: _Peer) -> None:
        svc = self._sessions.pop(peer, None)
        if svc is not None:
            self._end_service(svc)
        super()._drop(peer)

    def _in_session(self, peer: _Peer) -> bool:
        return peer in self._sessions
