"""``Session``: a model bound to one env, driven by hand or by :meth:`Session.run` (EVAL-10..32, DELTA-48).

The env is opened lazily on first use (EVAL-10); ``close()`` is idempotent and
any other use afterwards raises ``RuntimeError("session is closed")`` (EVAL-32).
``Session.run`` is the one drive loop: ``rlmesh.run`` and ``Model.run`` are
``session()`` + ``Session.run()`` + ``close()`` (DESIGN).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import adapters, view as view_pkg
from .._envkit.checks import env_failure
from ..models._route import ENV_TAGS_KEY
from ._drive import Drive
from ._loop import run_session
from ._observers import DriveStep

if TYPE_CHECKING:
    from ._hooks import RunHooks
    from ._results import RunResult

__all__ = ["Session", "new_session"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class Session(Generic[ObsT, ActT]):
    """A model bound to one env: drive it by hand, or pump whole episodes (seed 000).

    ``reset`` / ``predict`` / ``step`` drive one step at a time; ``predict``
    applies the model's adapter around its own predict and replays an action
    chunk one action per step when ``execution_horizon > 1``. :meth:`run` pumps
    whole episodes and returns a :class:`~rlmesh.RunResult`, leaving the
    session open. Close it with :meth:`close` or a ``with`` block.

    Not constructed directly: use ``rlmesh.session(model, env)`` or ``model.session(env)``.
    """

    _drive: Drive
    _read_cache: dict[Any, Any]

    def __init__(self) -> None:
        raise TypeError(
            "Session is not constructed directly; use rlmesh.session(model, env) or model.session(env)"
        )

    @classmethod
    def _new(cls, drive: Drive) -> Session[Any, Any]:
        self = object.__new__(cls)
        self._drive = drive
        self._read_cache = {}
        return self

    # -- state -----------------------------------------------------------------------------

    def _single(self, op: str) -> Drive:
        """The open drive of a single env (connects if needed)."""
        drive = self._drive
        drive.ensure_open()
        env = drive.connect()
        if env.is_vector:
            raise ValueError(
                f"Session.{op}() drives a single env, but the env reports num_envs={env.num_envs}; "
                "pump all lanes with Session.run() / rlmesh.run(), or serve num_envs=1 for manual driving"
            )
        return drive

    # Read-only views of the drive under their former names (this module's tests look at them).

    @property
    def _conn(self) -> Any:
        """The opened env side, or ``None`` before the first use."""
        return self._drive.env

    @property
    def _route(self) -> Any:
        """The route the session was built with (a served model's client route unwrapped)."""
        return self._drive.given_route

    @property
    def _episode_id(self) -> str:
        return self._drive.episode.id

    @property
    def done(self) -> bool:
        """Whether the current episode has terminated or truncated (EVAL-11)."""
        return self._drive.episode.done

    @property
    def contract(self) -> Any:
        """The env's contract (connects if needed): metadata, spaces, ``num_envs`` (DELTA-48)."""
        self._drive.ensure_open()
        return self._drive.connect().contract

    @property
    def num_envs(self) -> int:
        """Lanes the env drives (1 for a single env)."""
        self._drive.ensure_open()
        return self._drive.connect().num_envs

    @property
    def selected_workflow_edition(self) -> str:
        """The workflow edition the env connection negotiated (remote envs only).

        Raises:
            RuntimeError: the env is local (in-process envs negotiate nothing).
        """
        self._drive.ensure_open()
        env = self._drive.connect()
        if not env.remote:
            raise RuntimeError(
                "a local env negotiates no workflow edition: only a remote env connection "
                "(RemoteEnv / an address) selects one at handshake"
            )
        return env.workflow_edition

    # -- manual driving --------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, trial_index: int | None = None
    ) -> tuple[ObsT, Mapping[str, Any]]:
        """Begin a new episode: end the previous one, then reset the env and adapter (EVAL-12).

        Ending the previous episode fires the model's ``on_episode_end``.
        ``trial_index`` is passed as ``options={"trial_index": t}`` only to an env
        that declares the option; otherwise a ``UserWarning`` (DELTA-47).
        """
        drive = self._single("reset")
        obs, info = drive.begin(seed, trial_index, warn=True)
        if drive.view_cfg is not None or drive.viewer is not None:
            view = drive.attach_view(self)
            if view is not None:
                drive.manual_episode += 1
                view.on_episode_start(drive.manual_episode, seed, 0, obs, 0)
        return obs, info

    def predict(self, observation: ObsT) -> ActT:
        """Map one env observation to an env-ready action (the model's adapter applied, EVAL-13)."""
        action: ActT = self._single("predict").route.predict(observation)
        return action

    def step(self, action: ActT) -> tuple[ObsT, float, bool, bool, Mapping[str, Any]]:
        """Apply one action to the env; record reward and termination (EVAL-14)."""
        drive = self._single("step")
        env = drive.env
        assert env is not None
        view = drive.viewer
        t0 = time.perf_counter() if view is not None else 0.0
        obs, reward, terminated, truncated, info = env.step(action)
        try:
            r, te, tr = float(reward), bool(terminated), bool(truncated)
        except Exception as exc:
            raise env_failure("step", exc) from None
        episode = drive.episode
        episode.steps += 1
        episode.reward += r
        if view is not None and not view.viewer.disabled:
            env_ms = (time.perf_counter() - t0) * 1e3
            if view.on_step(
                DriveStep(0, None, obs, episode.steps, episode.reward, r, action, 0.0, env_ms)
            ) and not (te or tr):
                tr = True  # the viewer's "end episode": this step reports the episode truncated
            if te or tr:
                view.outcome(te, tr, info)
        episode.terminated, episode.truncated = te, tr
        episode.last_info = info
        return obs, r, te, tr, info

    # -- roles (adapters integration) ----------------------------------------------------

    def reader(self, *items: object) -> Any:
        """Build a read-only, role-addressed view over this env's observations (EVAL-15)."""
        self._drive.ensure_open()
        if not items:
            raise TypeError("reader() needs at least one role or model-input leaf")
        return adapters.build_reader(self._drive.connect().contract, *items)

    def read(self, observation: object, item: object) -> Any:
        """One-shot read of a single role from one observation; readers cached per item (EVAL-16)."""
        self._drive.ensure_open()
        try:
            key: Any = item
            reader = self._read_cache.get(key)
        except TypeError:  # unhashable leaf
            key = ("id", id(item))
            reader = self._read_cache.get(key)
        if reader is None:
            reader = self.reader(item)
            self._read_cache[key] = reader
        out = reader(observation)
        if isinstance(out, Mapping) and len(out) == 1:
            return next(iter(out.values()))
        return out

    def observation_roles(self) -> Any:
        """The observation roles this env declares, grouped by kind; empty when untagged (EVAL-17)."""
        self._drive.ensure_open()
        tags = (self._drive.connect().metadata or {}).get(ENV_TAGS_KEY)
        return adapters.observation_roles(tags)

    def frame_sources(self) -> tuple[str, ...]:
        """The viewer's cameras (DELTA-45, VIEW-3): ``render`` when the env renders RGB, then the
        declared image roles (or, for an env that declares none, its image-like observation leaves)."""
        self._drive.ensure_open()
        env = self._drive.connect()
        return tuple(s.label for s in view_pkg.discover_sources(self, env=env.render_target))

    # -- pumping -----------------------------------------------------------------------------

    def run(
        self,
        *,
        seeds: Sequence[int] | None = None,
        max_episodes: int | None = None,
        episodes: int | None = None,
        max_episode_steps: int | None = None,
        max_episode_seconds: float | None = None,
        hooks: RunHooks | None = None,
        trial_index_base: int = 0,
        progress: bool | None = None,
    ) -> RunResult:
        """Drive whole episodes to completion and return a typed ``RunResult`` (EVAL-20..27).

        ``seeds`` gives a per-episode seed and sets the episode count unless
        ``max_episodes`` is given (``episodes=`` is the 0.1.0 spelling and must then
        agree with ``len(seeds)``). ``max_episode_steps`` / ``max_episode_seconds``
        cap each episode (hitting a cap marks it truncated). ``hooks`` observes the
        loop; ``on_run_end`` fires exactly once, even on an error or interrupt.
        ``progress`` draws the live line on stderr (``None``: on a terminal or in
        Jupyter, once the run has gone on for 1.5 s; see ``rlmesh.run``).
        Leaves the session open.
        """
        return run_session(
            self._drive,
            self,
            seeds=seeds,
            max_episodes=max_episodes,
            episodes=episodes,
            max_episode_steps=max_episode_steps,
            max_episode_seconds=max_episode_seconds,
            hooks=hooks,
            trial_index_base=trial_index_base,
            progress=progress,
        )

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close this session: end the open episode, release the route, close what it opened (EVAL-30).

        Idempotent. A model instance you passed in is never closed (DELTA-29); one
        built from a class is. The env is shut down only with ``close_env=True``;
        a connection the session dialed and an env it built from a factory are
        always closed. Every step runs; the first error is re-raised.
        """
        drive = self._drive
        if drive.closed:
            return
        errors = drive.close()
        self._read_cache.clear()
        if errors:
            raise errors[0]

    def __enter__(self) -> Session[ObsT, ActT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        drive = self._drive
        state = (
            "closed" if drive.closed else ("connected" if drive.env is not None else "unconnected")
        )
        model = getattr(drive.route, "model", drive.route)
        return f"<Session model={model!r} env={type(drive.target).__name__} {state}>"


def new_session(drive: Drive) -> Session[Any, Any]:
    """A session over ``drive``, a route bound to a classified env (nothing is opened yet, EVAL-10)."""
    return Session._new(drive)


def _render_target(context: Any) -> Any:
    """The env whose ``render()`` a session's viewer and recorder call (``None``: not a session)."""
    return context._drive.render_target() if isinstance(context, Session) else None


view_pkg.register_render_target(_render_target)
