"""The fleet's vector env: every endpoint as one vector env, reconnecting after a restart.

The contract (docs/scaling.md ("Many hosts: a Ray fleet")):

- ``step`` (or ``reset``) on a fleet whose actor died raises :class:`LanesLost`, a
  ``ConnectionError`` naming the lost actors, their old addresses and their lanes; so do
  the two halves of a split step, ``step_async`` and ``step_wait``, whichever meets it;
- every later ``step`` (or ``step_async`` / ``step_wait``) raises it again until
  ``reset()`` is called;
- ``reset()`` waits for Ray to restart the actors, reconnects every endpoint (the
  live ones too: one batch, one episode boundary for every lane) and resets them all
  with the seed and options given. If the reset itself meets a lost endpoint it
  reconnects and retries once.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from typing import TYPE_CHECKING, Any

from .. import jax as _jax, numpy as _numpy, torch as _torch  # facades that import no framework
from ..errors import ConnectionLost, EndpointBusy, EndpointLost, LanesLost
from ..transport.probe import ping

if TYPE_CHECKING:
    from ._actor import ActorInfo
    from ._fleet import EnvFleet

__all__ = ["FleetVectorEnv", "open_fleet_vector_env"]

_PING_SECONDS = 1.0
_BUSY_RETRY_SECONDS = 5.0  # a just-closed session may take a moment to be released server-side
#: Attributes copied from the wrapped env (and kept across reconnects).
_SURFACE = (
    "num_envs",
    "single_observation_space",
    "single_action_space",
    "observation_space",
    "action_space",
    "metadata",
    "render_mode",
    "spec",
    "autoreset_mode",
)


_FACADES = {"numpy": _numpy, "torch": _torch, "jax": _jax}


def _flavour_class(flavour: str) -> Any:
    if flavour == "gymnasium":  # imports gymnasium (an optional dependency): on first use only
        from .. import gymnasium as _gymnasium

        return _gymnasium.RemoteVectorEnv
    return _FACADES[flavour].RemoteVectorEnv


def _connect(cls: Any, infos: list[ActorInfo], kwargs: dict[str, Any]) -> Any:
    """``cls(addresses)``; one vector endpoint is dialed by its address alone."""
    addresses = [info.address for info in infos]
    if len(infos) == 1 and infos[0].num_envs > 1:
        return cls(addresses[0], **kwargs)
    return cls(addresses, **kwargs)


class FleetVectorEnv:
    """``rlmesh.<flavour>.RemoteVectorEnv`` over a fleet's endpoints, reconnecting on ``reset``.

    Everything but ``reset``/``step``/``close`` is the wrapped env's (``client``,
    ``render`` ...). :attr:`lost_lanes` lists the lanes lost since the last reset.
    """

    def __init__(self, fleet: EnvFleet, flavour: str, kwargs: dict[str, Any]) -> None:
        self._fleet = fleet
        self._cls = _flavour_class(flavour)
        self._kwargs = dict(kwargs)
        self._lost: LanesLost | None = None
        self.reconnects = 0
        self._open(fleet.info())

    # -- the vector env ---------------------------------------------------------------------

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset every lane; first reconnect if actors were lost (waits for Ray's restart)."""
        if self._lost is not None:
            self._reconnect()
        try:
            out: tuple[Any, dict[str, Any]] = self._inner.reset(**kwargs)
            return out
        except ConnectionError as exc:
            self._lost = self._lost_error(exc)
        self._reconnect()
        try:
            out = self._inner.reset(**kwargs)
            return out
        except ConnectionError as exc:
            raise self._lost_error(exc) from exc

    def step(self, actions: Any) -> Any:
        """Step every lane; :class:`LanesLost` when an actor died (then ``reset()`` reconnects)."""
        if self._lost is not None:
            raise self._lost
        try:
            return self._inner.step(actions)
        except ConnectionError as exc:
            self._lost = self._lost_error(exc)
            raise self._lost from exc

    def step_async(self, actions: Any) -> None:
        """Send every lane its action (the first half of :meth:`step`); :class:`LanesLost` as ``step``."""
        if self._lost is not None:
            raise self._lost
        try:
            self._inner.step_async(actions)
        except ConnectionError as exc:
            self._lost = self._lost_error(exc)
            raise self._lost from exc

    def step_wait(self) -> Any:
        """Gather the step :meth:`step_async` sent; :class:`LanesLost` as ``step``."""
        if self._lost is not None:
            raise self._lost
        try:
            return self._inner.step_wait()
        except ConnectionError as exc:
            self._lost = self._lost_error(exc)
            raise self._lost from exc

    def close(self, **kwargs: Any) -> None:
        """Detach from every endpoint (the fleet keeps serving). Idempotent."""
        inner = self.__dict__.get("_inner")
        if inner is not None:
            inner.close()

    @property
    def lost_lanes(self) -> list[int]:
        """Lanes lost since the last reset (empty while every endpoint serves)."""
        return [] if self._lost is None else list(self._lost.lanes)

    @property
    def wrapped(self) -> Any:
        """The current ``rlmesh.<flavour>.RemoteVectorEnv`` (a new one after each reconnect)."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __enter__(self) -> FleetVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        lost = f", lost lanes {self.lost_lanes}" if self._lost is not None else ""
        return f"<FleetVectorEnv {len(self._infos)} endpoints, {self.num_envs} lanes{lost}>"

    # -- internals --------------------------------------------------------------------------

    def _open(self, infos: list[ActorInfo]) -> None:
        deadline = time.monotonic() + _BUSY_RETRY_SECONDS
        while True:
            try:
                inner = _connect(self._cls, infos, self._kwargs)
                break
            except EndpointBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        old = self.__dict__.get("_inner")
        if old is not None and (
            inner.num_envs != old.num_envs
            or inner.single_observation_space != old.single_observation_space
        ):
            inner.close()
            raise ConnectionLost(
                "a restarted fleet actor serves a different env (lanes or spaces changed); close the fleet"
            )
        self._inner = inner
        self._infos = infos
        for name in _SURFACE:
            if hasattr(inner, name):
                with contextlib.suppress(AttributeError):
                    setattr(self, name, getattr(inner, name))

    def _reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self._inner.close()
        self._open(self._fleet.info())  # waits for the restarted actors' new addresses
        self._lost = None
        self.reconnects += 1

    def _lost_error(self, exc: BaseException) -> LanesLost:
        """Which endpoints are gone: no answer at the old address, or another incarnation serving there.

        An endpoint that answers but no longer holds our session may be a restarted actor
        that got the same port, or a live one whose session the client closed: the actor's
        incarnation tells them apart.
        """
        lost: list[int] = []
        unsure: list[int] = []
        for i, info in enumerate(self._infos):
            try:
                state = ping(info.address, timeout_seconds=_PING_SECONDS).state
            except (ConnectionError, TimeoutError):
                lost.append(i)
                continue
            if state != "busy":
                unsure.append(i)
        if unsure:
            try:
                current = self._fleet.info()
            except Exception:
                lost.extend(unsure)
            else:
                lost.extend(
                    i for i in unsure if current[i].incarnation != self._infos[i].incarnation
                )
            lost.sort()
        if (
            not lost
        ):  # every endpoint is the one we dialed, yet the connection broke: count them all
            lost = list(range(len(self._infos)))
        starts = [0]
        for info in self._infos:
            starts.append(starts[-1] + info.num_envs)
        lanes = [lane for i in lost for lane in range(starts[i], starts[i + 1])]
        addresses = [self._infos[i].address for i in lost]
        names = ", ".join(
            f"actor {i} at {self._infos[i].address} (lanes {starts[i]}..{starts[i + 1] - 1})"
            for i in lost
        )
        return LanesLost(
            f"lost {names}: {_cause(exc)}. To go on, call reset(): it waits for Ray to restart "
            "the lost actors, reconnects and resets every lane",
            actors=lost,
            addresses=addresses,
            lanes=lanes,
        )


def _cause(exc: BaseException) -> str:
    """What broke, without the inner client's own recovery advice (the fleet's is ``reset()``).

    The fleet's env is a many-endpoint client whose ``EndpointLost`` says "call
    reconnect(i) then reset()"; a fleet reconnects by itself, so only the cause is kept.
    """
    if isinstance(exc, EndpointLost):
        cause = exc.__cause__
        return "its connection broke" if cause is None else f"{type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {exc}"


def open_fleet_vector_env(fleet: EnvFleet, flavour: str, kwargs: dict[str, Any]) -> Any:
    """A :class:`FleetVectorEnv`; for ``"gymnasium"``, one that is a ``gymnasium.vector.VectorEnv``."""
    if flavour != "gymnasium":
        return FleetVectorEnv(fleet, flavour, kwargs)
    return _gymnasium_class()(fleet, flavour, kwargs)


_GYM_CLASS: list[type] = []


def _gymnasium_class() -> type:
    """``FleetVectorEnv`` that is also a ``gymnasium.vector.VectorEnv`` (built once, on first use)."""
    if not _GYM_CLASS:
        vector = importlib.import_module("gymnasium.vector")

        class GymnasiumFleetVectorEnv(FleetVectorEnv, vector.VectorEnv):  # type: ignore[name-defined,misc]
            """A fleet's vector env as a real ``gymnasium.vector.VectorEnv``."""

            def close(self, **kwargs: Any) -> None:
                FleetVectorEnv.close(self)
                self.closed = True

        GymnasiumFleetVectorEnv.__module__ = __name__
        _GYM_CLASS.append(GymnasiumFleetVectorEnv)
    return _GYM_CLASS[0]
