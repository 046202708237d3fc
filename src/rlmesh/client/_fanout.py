"""One vector env over many endpoints: send to every endpoint, then gather (issue 26).

Theory of operation
-------------------
``RemoteVectorEnv([addr0, addr1, ...])`` dials each address with a NumPy client that
takes scalar and vector endpoints alike (:class:`_EndpointClient`). Lanes are
concatenated in address order: endpoint ``k`` owns the global lanes
``offset_k .. offset_k + n_k - 1`` (a scalar endpoint owns one lane).

A step sends every endpoint its slice of the batched action first
(``step_async``), then reads the replies in address order (``step_wait``): the
servers compute at the same time and one slow endpoint does not hold back the
others' requests. Replies are batched as for one endpoint (leaves concatenated on
the lane axis) and ``info`` is rebuilt in Gymnasium's vector layout (``_key`` masks,
``final_obs`` / ``final_info``) one lane at a time, with the same rules as
``gymnasium.vector.VectorEnv._add_info``.

Autoreset: every vector endpoint must serve the same mode. A scalar endpoint does
not reset itself, so this side does it, in the agreed mode, exactly as
``gymnasium.vector.SyncVectorEnv`` does for its sub-envs: NEXT_STEP sends a reset
instead of the step after the lane ended (reward 0, flags False, the reset's info);
SAME_STEP resets in the ending step (the terminal obs and info go to ``final_obs``
/ ``final_info``). With only scalar endpoints the mode is NEXT_STEP (as
``gymnasium.make_vec``) unless ``autoreset_mode=`` says otherwise.

Deadlines: a round (``step_wait``, ``reset``) has one deadline,
``request_timeout_seconds`` from its start, computed once; each endpoint's reply is
awaited only for the time left (a reply already here is read even after the deadline),
so the round returns or raises within about the request timeout however many endpoints
hang. ``close`` sends every endpoint its ``Close`` first, then gathers the answers
within one close timeout overall.

Failures: a request error is raised only after every other endpoint's reply was
read, so the others stay in step. An endpoint whose connection broke, whose session
ended, or whose reply did not decode raises :class:`rlmesh.errors.EndpointLost` naming
it and its lanes (the cause attached); afterwards :meth:`FanOut.reconnect` dials it
again (then reset) and :meth:`FanOut.close` closes everything. Endpoints that missed
the round's deadline raise one :class:`rlmesh.errors.EndpointTimeout` naming all of
them; their sessions stay usable.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from .._autoreset import Autoreset
from .._contract import EnvContract
from ..errors import (
    AlreadyPendingCallError,
    EndpointLost,
    EndpointTimeout,
    EnvironmentException,
    NoAsyncCallError,
    ProtocolException,
    RequestTimeout,
    SessionClosed,
)
from ..wire import messages as m
from ._lanes import batch1, concat, lane_infos, lane_seeds, merge, take
from ._parts import (
    EndpointClient as _EndpointClient,
    EndpointPart as _Part,
    check_same as _check_same,
)
from ._session import _CLOSE_TIMEOUT_SECONDS

__all__ = ["FanOut", "FanOutHandle", "normalize_autoreset"]

#: Once a round's deadline has passed, a reply already here is still read; one that is
#: not gets this long (a client wait of 0 would mean "forever").
LATE_READ_SECONDS = 0.001


def normalize_autoreset(mode: Any) -> str | None:
    """``None``, or the wire name of any spelling :meth:`Autoreset.parse` reads."""
    return None if mode is None else Autoreset.parse(mode, what="autoreset_mode").value


class FanOut:
    """Many endpoints as one batch of lanes (NumPy values); the engine under every flavour.

    Args:
        addresses: Endpoint addresses, in lane order.
        connect_timeout_seconds, request_timeout_seconds, workflow_edition, token, tls_ca: As
            for one endpoint (one token for every endpoint).
        autoreset_mode: The mode scalar endpoints follow (and vector endpoints must serve);
            ``None``: the vector endpoints' mode, or NEXT_STEP when all are scalar.

    Raises:
        ValueError: no address, or endpoints whose spaces or autoreset modes differ
            (the message names the endpoint that differs).
    """

    def __init__(
        self, addresses: Sequence[str], dial: Mapping[str, Any], autoreset_mode: Any = None
    ) -> None:
        if isinstance(addresses, str) or not len(addresses):
            raise ValueError("RemoteVectorEnv([...]) needs a non-empty list of endpoint addresses")
        self._kwargs = dict(dial)  # each endpoint's client keywords (dial_keywords)
        wanted = normalize_autoreset(autoreset_mode)
        parts: list[_Part] = []
        try:
            offset = 0
            for i, address in enumerate(addresses):
                client = self._dial(str(address))
                part = _Part(i, client.address, client, offset)
                parts.append(part)
                offset += part.n
            self._parts = parts
            self.mode = self._agree(wanted)
        except BaseException:
            for part in parts:
                part.client.close()
            raise
        self.num_envs = offset
        self.contract: EnvContract = parts[0].client.env_contract
        #: ``request_timeout_seconds`` as the clients read it (``None``: no deadline).
        self.timeout: float | None = parts[0].client._request_timeout
        self._pending = False
        self._closed = False

    def _dial(self, address: str) -> _EndpointClient:
        client = _EndpointClient(address, **self._kwargs)
        client.runtime = {}
        return client

    def _agree(self, wanted: str | None) -> str:
        """The common autoreset mode; spaces must match endpoint 0's (ValueError naming the odd one)."""
        first = self._parts[0]
        obs0, act0 = first.client.observation_space_spec, first.client.action_space_spec
        mode: str | None = wanted
        source = "autoreset_mode="
        for part in self._parts:
            _check_same(part, first, "observation", part.client.observation_space_spec, obs0)
            _check_same(part, first, "action", part.client.action_space_spec, act0)
            if part.scalar:
                continue
            served = part.client._autoreset
            if mode is None:
                mode, source = served, part.name()
            elif served != mode:
                raise ValueError(
                    f"{part.name()} autoresets {served!r} but {source} says {mode!r}; every vector endpoint "
                    "must serve the same autoreset mode (rlmesh serve --autoreset ...)"
                )
        return mode or "NextStep"

    # -- properties ---------------------------------------------------------------------

    @property
    def parts(self) -> list[_Part]:
        return self._parts

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self._parts]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> bool:
        return self._pending

    # -- stepping -----------------------------------------------------------------------

    def step_async(self, actions: Any) -> None:
        """Send every endpoint its lanes' actions (NumPy trees with a leading lane axis)."""
        if self._pending:
            raise AlreadyPendingCallError(
                "step_async() while a step is in flight: call step_wait() first"
            )
        self._check_usable()
        n = self.num_envs
        slices = [
            take(
                actions, slice(p.offset, p.offset + p.n) if not p.scalar else p.offset, n, "actions"
            )
            for p in self._parts
        ]
        errors: list[tuple[_Part, BaseException]] = []
        self._pending = True
        for part, local in zip(self._parts, slices):
            try:
                if part.scalar and part.needs_reset and self.mode == Autoreset.NEXT_STEP:
                    part.sent = ("autoreset", part.client._reset_send([], None, []))
                else:
                    part.client._step_send(local)
                    part.sent = "step"
            except BaseException as exc:  # raised after the others were sent (and in step_wait)
                part.sent = None
                errors.append((part, exc))
        self._send_errors = errors

    def step_wait(
        self,
    ) -> tuple[
        Any,
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        dict[str, Any],
        dict[str, Any],
    ]:
        """Gather every endpoint's reply: ``(obs, rewards, terminations, truncations, info, runtime)``."""
        if not self._pending:
            raise NoAsyncCallError(
                "step_wait() with no step in flight: call step_async(actions) first"
            )
        self._pending = False
        timeout = self.timeout  # the round's deadline, inline: no call per step without one
        deadline = None if timeout is None else time.monotonic() + timeout
        errors = list(self._send_errors)
        self._send_errors = []
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terms = np.zeros(n, dtype=bool)
        truncs = np.zeros(n, dtype=bool)
        per_lane: list[dict[str, Any] | None] = [None] * n
        same_step = self.mode == Autoreset.SAME_STEP
        again: list[_Part] = []
        for part in self._parts:
            sent, part.sent = part.sent, None
            if sent is None:
                continue
            client = part.client
            client.runtime = {}
            sl = slice(part.offset, part.offset + part.n)
            try:
                if sent == "step":
                    left = None if deadline is None else _left(deadline)
                    obs, rew, term, trunc, info = client._step_recv(left)
                else:
                    obs, info = client._reset_recv(sent[1], _left(deadline))
                    rew, term, trunc = 0.0, False, False
                    part.needs_reset = False
            except BaseException as exc:
                errors.append((part, exc))
                continue
            if part.scalar:
                done = bool(term or trunc)
                rewards[part.offset], terms[part.offset], truncs[part.offset] = (
                    float(rew),
                    bool(term),
                    bool(trunc),
                )
                if done and same_step:
                    per_lane[part.offset] = {"final_obs": obs, "final_info": info}
                    again.append(part)
                    part.obs = batch1(obs)
                    continue
                if done and self.mode == Autoreset.NEXT_STEP:
                    part.needs_reset = True
                part.obs = batch1(obs)
                per_lane[part.offset] = info
            else:
                rewards[sl], terms[sl], truncs[sl] = rew, term, trunc
                part.obs = obs
                for j, lane in enumerate(lane_infos(info, part.n, same_step, term | trunc)):
                    per_lane[part.offset + j] = lane
        # SAME_STEP scalar endpoints reset inside the ending step: send all, then gather
        for part in again:
            try:
                part.sent = ("autoreset", part.client._reset_send([], None, []))
            except BaseException as exc:
                errors.append((part, exc))
        for part in again:
            sent, part.sent = part.sent, None
            if sent is None:
                continue
            try:
                obs, info = part.client._reset_recv(sent[1], _left(deadline))
            except BaseException as exc:
                errors.append((part, exc))
                continue
            part.obs = batch1(obs)
            final = per_lane[part.offset] or {}
            per_lane[part.offset] = {**final, **info}
        if errors:
            self._raise(errors, "step")
        info = merge(per_lane, n)
        return self._obs(), rewards, terms, truncs, info, self._runtime()

    # -- resetting ----------------------------------------------------------------------

    def reset(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        env_indices: Sequence[int] | None = None,
    ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """Reset every lane (lane ``i`` seeded ``seed + i``) or only ``env_indices``; ``(obs, info, runtime)``.

        Each endpoint resets only its own lanes: a whole endpoint gets a plain reset,
        some lanes of a vector endpoint a partial one (``env_indices``).
        """
        if self._pending:
            raise AlreadyPendingCallError(
                "reset() while a step is in flight: call step_wait() first"
            )
        if self._closed:
            raise SessionClosed(
                "not connected: this vector env was closed; create a new one to reconnect"
            )
        deadline = self._deadline()
        n = self.num_envs
        if env_indices is None:
            chosen = list(range(n))
        else:
            chosen = sorted({int(i) for i in env_indices})
            if not chosen:
                raise ValueError("env_indices selects no lane")
            if chosen[0] < 0 or chosen[-1] >= n:
                raise ValueError(
                    f"env_indices must be lane numbers in 0..{n - 1}, got {list(env_indices)}"
                )
            if any(p.obs is None for p in self._parts if not set(p.lanes) <= set(chosen)):
                raise ValueError(
                    "a partial reset (env_indices) needs a full reset() first; call reset() without env_indices"
                )
        seeds = lane_seeds(seed, n, chosen)
        plans: list[tuple[_Part, list[int]]] = []
        for part in self._parts:
            local = [g - part.offset for g in chosen if part.offset <= g < part.offset + part.n]
            if local:
                plans.append((part, local))
        for part, _ in plans:
            if part.broken:
                raise part.lost(f"; call reconnect({part.index}) before resetting it, or close()")
        opts = dict(options) if options else None
        errors: list[tuple[_Part, BaseException]] = []
        for part, local in plans:
            part_seeds = [seeds[part.offset + j] for j in local] if seeds is not None else []
            try:
                if part.scalar or len(local) == part.n:
                    seed_int = isinstance(seed, (int, np.integer)) and not part.scalar
                    ctx = part.client._reset_send(part_seeds, opts, [], seed_int=seed_int)
                else:
                    ctx = part.client._reset_send(part_seeds, opts, local)
                part.sent = ctx
            except BaseException as exc:
                errors.append((part, exc))
        per_lane: list[dict[str, Any] | None] = [None] * n
        for part, local in plans:
            ctx, part.sent = part.sent, None
            if ctx is None:
                continue
            part.client.runtime = {}
            try:
                obs, info = part.client._reset_recv(ctx, _left(deadline))
            except BaseException as exc:
                errors.append((part, exc))
                continue
            if part.scalar:
                part.obs = batch1(obs)
                part.needs_reset = False
                per_lane[part.offset] = info
            else:
                part.obs = obs
                full = len(local) == part.n
                for j, lane in zip(
                    local, lane_infos(info, part.n if full else len(local), False, None)
                ):
                    per_lane[part.offset + j] = lane
        if errors:
            self._raise(errors, "reset")
        return self._obs(), merge(per_lane, n), self._runtime()

    # -- failures -----------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise SessionClosed(
                "not connected: this vector env was closed; create a new one to reconnect"
            )
        for part in self._parts:
            if part.broken:
                raise part.lost(
                    f"; call reconnect({part.index}) then reset(), or close() to close all"
                )

    def _deadline(self) -> float | None:
        """The round's deadline (``time.monotonic()``), computed once per round; ``None``: none."""
        timeout = self.timeout
        return None if timeout is None else time.monotonic() + timeout

    def _raise(self, errors: list[tuple[_Part, BaseException]], op: str) -> NoReturn:
        """Raise the round's failure, once every reply was read.

        An endpoint whose session ended (its connection broke, its reply did not decode, a
        send timed out) is marked lost and raised as ``EndpointLost`` with the cause
        attached; an env's own error as it is; endpoints that only missed the deadline,
        when nothing else failed, as one ``EndpointTimeout`` naming them all.
        """
        late: list[_Part] = []
        for part, exc in errors:
            if part.client.closed:
                part.broken = True
            elif isinstance(exc, RequestTimeout):
                late.append(part)
        for part, exc in errors:
            if part in late:
                continue
            if part.broken and not isinstance(exc, (EndpointLost, EnvironmentException)):
                why = (
                    f"its reply did not decode ({exc})"
                    if isinstance(exc, ProtocolException)
                    else str(exc)
                )
                raise part.lost(
                    f": {why}. The other endpoints are still connected: call "
                    f"reconnect({part.index}) (then reset()) to dial it again, or close() to close all"
                ) from exc
            raise exc
        timeout = self.timeout or 0.0
        names = ", ".join(p.name() for p in late)
        raise EndpointTimeout(
            f"{names} did not answer {op} within {timeout:.3f}s (request_timeout_seconds: one "
            "deadline for the round); every other endpoint's reply was read. "
            f"{'Its session stays' if len(late) == 1 else 'Their sessions stay'} usable: a late "
            "reply is discarded by the next request; reset() before relying on episode bookkeeping",
            timeout_seconds=timeout,
            indices=tuple(p.index for p in late),
            addresses=tuple(p.address for p in late),
            lanes=tuple(lane for p in late for lane in p.lanes),
        )

    def reconnect(self, endpoint: int | str) -> None:
        """Dial a lost (or any) endpoint again; reset its lanes before stepping.

        Args:
            endpoint: Its index in the address list, or its address.

        Raises:
            ValueError: no such endpoint, or the new session serves other spaces or lanes.
            ConnectionError: the endpoint still does not answer.
        """
        if self._pending:
            raise AlreadyPendingCallError(
                "reconnect() while a step is in flight: call step_wait() first"
            )
        part = self._find(endpoint)
        part.client.close()
        client = self._dial(part.address)
        fresh = _Part(part.index, client.address, client, part.offset)
        try:
            if fresh.n != part.n:
                raise ValueError(f"{part.name()} now serves {fresh.n} lanes, not {part.n}")
            _check_same(
                fresh,
                part,
                "observation",
                client.observation_space_spec,
                part.client.observation_space_spec,
            )
            _check_same(
                fresh, part, "action", client.action_space_spec, part.client.action_space_spec
            )
            if not fresh.scalar and client._autoreset != self.mode:
                raise ValueError(
                    f"{part.name()} now autoresets {client._autoreset!r}, not {self.mode!r}"
                )
        except BaseException:
            client.close()
            raise
        self._parts[part.index] = fresh

    def _find(self, endpoint: int | str) -> _Part:
        if isinstance(endpoint, (int, np.integer)) and not isinstance(endpoint, bool):
            if 0 <= int(endpoint) < len(self._parts):
                return self._parts[int(endpoint)]
        else:
            for part in self._parts:
                if endpoint in (part.address, part.address.removeprefix("tcp://")):
                    return part
        raise ValueError(f"no endpoint {endpoint!r}; endpoints: {self.addresses}")

    def close(self) -> None:
        """Close every endpoint's session (their servers keep running). Idempotent.

        Every endpoint is sent its ``Close`` first, then the answers are gathered within
        one close timeout overall (``request_timeout_seconds``, at most 5 s); an endpoint
        that does not answer in time is let go without one.
        """
        self._closed = True
        self._pending = False
        timeout = min(self.timeout or _CLOSE_TIMEOUT_SECONDS, _CLOSE_TIMEOUT_SECONDS)
        deadline = time.monotonic() + timeout
        asked = []
        for part in self._parts:
            session = part.client._session
            if session.closed:
                continue
            try:
                session.send(m.Close(reason="client close"), timeout=_left(deadline))
            except Exception:
                continue
            asked.append(session)
        for session in asked:
            try:
                session.receive(timeout=_left(deadline))
            except Exception:
                pass
        for part in self._parts:  # the local ends: no second round trip
            try:
                part.client._session.detach()
            except Exception:
                pass

    # -- values -------------------------------------------------------------------------

    def _obs(self) -> Any:
        return concat([p.obs for p in self._parts])

    def _runtime(self) -> dict[str, Any]:
        ids: list[Any] = []
        completed = 0
        for p in self._parts:
            rt = p.client.runtime
            got = rt.get("episode_ids")
            ids.extend(got if isinstance(got, list) and len(got) == p.n else p.client._episode_ids)
            completed += int(rt.get("completed_episodes", 0) or 0)
        return {"episode_ids": ids, "completed_episodes": completed}


def _left(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (at least :data:`LATE_READ_SECONDS`); ``None``: no deadline."""
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), LATE_READ_SECONDS)


class FanOutHandle:
    """What a many-endpoint vector env of any flavour shows of its :class:`FanOut`."""

    _fan: FanOut

    @property
    def addresses(self) -> list[str]:
        """The endpoint addresses, in lane order."""
        return self._fan.addresses

    @property
    def endpoint_lanes(self) -> list[range]:
        """The global lanes each endpoint serves, in address order."""
        return [p.lanes for p in self._fan.parts]

    def reconnect(self, endpoint: int | str) -> None:
        """Dial endpoint ``endpoint`` (index or address) again; reset its lanes before stepping."""
        self._fan.reconnect(endpoint)
