"""``Session``: a model bound to one env, driven by hand or by :meth:`Session.run` (EVAL-10..32, DELTA-48).

The env is opened lazily on first use (EVAL-10); ``close()`` is idempotent and
any other use afterwards raises ``RuntimeError("session is closed")`` (EVAL-32).
``Session.run`` is the one drive loop: ``rlmesh.run`` and ``Model.run`` are
``session()`` + ``Session.run()`` + ``close()`` (DESIGN).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import adapters, view as view_pkg
from .._envkit.checks import Checks, env_failure, local_checks, local_scalar_step
from .._envkit.results import normalize_reset
from ..models._route import ENV_TAGS_KEY, LocalRoute, new_episode_id
from ..models._warn import user_stacklevel
from ..tensor import Tensor
from ..view._hud import outcome_of
from ._loop import run_session
from ._results import success_from_info
from ._targets import EnvConn, open_target
from ._trial import ENV_RESET_OPTIONS_KEY, TRIAL_INDEX, declares_reset_option

if TYPE_CHECKING:
    from ._hooks import RunHooks
    from ._results import RunResult

__all__ = ["Session"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


def _has_tensor_leaf(tree: Any) -> bool:
    if isinstance(tree, Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(_has_tensor_leaf(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_has_tensor_leaf(v) for v in tree)
    return False


class Session(Generic[ObsT, ActT]):
    """A model bound to one env: drive it by hand, or pump whole episodes (seed 000).

    ``reset`` / ``predict`` / ``step`` drive one step at a time; ``predict``
    applies the model's adapter around its own predict and replays an action
    chunk one action per step when ``execution_horizon > 1``. :meth:`run` pumps
    whole episodes and returns a :class:`~rlmesh.RunResult`, leaving the
    session open. Close it with :meth:`close` or a ``with`` block.

    Not constructed directly: use ``rlmesh.session(model, env)`` or ``model.session(env)``.
    """

    _route: Any
    _target: Any
    _kind: str
    _close_env: bool
    _workflow_edition: str | None
    _owned_model: Any
    _prefetch_lead: int
    _conn: EnvConn | None
    _closed: bool
    _episode_open: bool
    _episode_id: str
    _seed: int | None
    _trial: int | None
    _steps: int
    _reward: float
    _terminated: bool
    _truncated: bool
    _last_info: Mapping[str, Any]
    _ep_start: float
    _read_cache: dict[Any, Any]
    _view_cfg: Any
    _viewer: Any
    _manual_episode: int
    _checks: Checks | None
    _step: Any

    def __init__(self) -> None:
        raise TypeError(
            "Session is not constructed directly; use rlmesh.session(model, env) or model.session(env)"
        )

    @classmethod
    def _new(
        cls,
        route: Any,
        target: Any,
        kind: str,
        *,
        close_env: bool,
        workflow_edition: str | None,
        owned_model: Any = None,
        prefetch_lead: int = 0,
        view: Any = None,
    ) -> Session[Any, Any]:
        self = object.__new__(cls)
        self._route = route
        self._target = target
        self._kind = kind
        self._close_env = bool(close_env)
        self._workflow_edition = workflow_edition
        self._owned_model = owned_model
        self._prefetch_lead = prefetch_lead
        self._conn = None
        self._closed = False
        self._episode_open = False
        self._episode_id = ""
        self._seed = None
        self._trial = None
        self._steps = 0
        self._reward = 0.0
        self._terminated = False
        self._truncated = False
        self._last_info = {}
        self._ep_start = 0.0
        self._read_cache = {}
        self._view_cfg = view  # a normalized rlmesh.View or None (VIEW-2)
        self._viewer = None
        self._manual_episode = -1
        self._checks = None  # SRV-60 / CNF-4 checks of an in-process env, built on connect
        self._step = None  # the env step the drive loops call (checked when the env is local)
        return self

    # -- state -----------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "session is closed; open a new one with rlmesh.session(model, env)"
            )

    def _connect(self) -> EnvConn:
        """Open the env on first use: dial/build, contract, adapter, horizon (EVAL-10)."""
        conn = self._conn
        if conn is not None:
            return conn
        conn = open_target(self._target, self._kind, workflow_edition=self._workflow_edition)
        try:
            if isinstance(self._route, LocalRoute) or hasattr(self._route, "predict_lane"):
                self._route.bind(conn, lanes=conn.num_envs if conn.is_vector else 1)
            else:
                self._route.bind(conn)
        except BaseException:
            if conn.dialed or conn.built:  # DELTA-48: close what we opened before propagating
                try:
                    conn.close(close_env=False)
                except Exception:
                    pass
            raise
        if not conn.remote:  # CNF-4: the policy is resolved once per session
            contract = conn.contract
            self._checks = local_checks(
                contract.observation_space, contract.action_space, conn.num_envs if conn.is_vector else None
            )
        self._step = conn.step if conn.remote or conn.is_vector else local_scalar_step(conn.env.step, self._checks)
        self._conn = conn
        return conn

    def _require_single(self, conn: EnvConn, op: str) -> None:
        if conn.is_vector:
            raise ValueError(
                f"Session.{op}() drives a single env, but the env reports num_envs={conn.num_envs}; "
                "pump all lanes with Session.run() / rlmesh.run(), or serve num_envs=1 for manual driving"
            )

    def _attach_view(self) -> Any:
        """The session's live viewer, started on first use after connect; ``None`` when off (VIEW-3, VIEW-9)."""
        viewer = self._viewer
        if viewer is not None:
            return None if viewer.disabled or viewer.closed else viewer
        if self._view_cfg is None:
            return None
        cfg, self._view_cfg = self._view_cfg, None  # one attempt per session: a failure warns once
        self._viewer = view_pkg.open_viewer(cfg, self, route=self._route)
        return self._viewer

    @property
    def done(self) -> bool:
        """Whether the current episode has terminated or truncated (EVAL-11)."""
        return self._terminated or self._truncated

    @property
    def contract(self) -> Any:
        """The env's contract (connects if needed): metadata, spaces, ``num_envs`` (DELTA-48)."""
        self._ensure_open()
        return self._connect().contract

    @property
    def num_envs(self) -> int:
        """Lanes the env drives (1 for a single env)."""
        self._ensure_open()
        return self._connect().num_envs

    @property
    def selected_workflow_edition(self) -> str:
        """The workflow edition the env connection negotiated (remote envs only).

        Raises:
            RuntimeError: the env is local (in-process envs negotiate nothing).
        """
        self._ensure_open()
        conn = self._connect()
        if not conn.remote:
            raise RuntimeError(
                "a local env negotiates no workflow edition: only a remote env connection "
                "(RemoteEnv / an address) selects one at handshake"
            )
        return str(conn.env.selected_workflow_edition)

    # -- manual driving --------------------------------------------------------------------

    def _end_open_episode(self) -> None:
        if self._episode_open:
            self._episode_open = False
            self._route.end_episode(self._episode_id)

    def _reset_options(self, conn: EnvConn, trial_index: int | None, *, warn: bool) -> dict[str, Any] | None:
        if trial_index is None:
            return None
        if declares_reset_option(conn.metadata, TRIAL_INDEX):
            return {TRIAL_INDEX: int(trial_index)}
        if warn:
            warnings.warn(
                'trial_index was given but this env declares no "trial_index" reset option '
                f"(metadata '{ENV_RESET_OPTIONS_KEY}'); resetting without it",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        return None

    def _begin(self, conn: EnvConn, seed: int | None, trial_index: int | None, *, warn: bool) -> tuple[Any, Mapping[str, Any]]:
        self._end_open_episode()
        options = self._reset_options(conn, trial_index, warn=warn)
        env = conn.env
        if options is not None:
            ret = env.reset(seed=seed, options=options)
        elif seed is not None:
            ret = env.reset(seed=seed)
        else:
            ret = env.reset()
        obs, info = normalize_reset(ret)
        checks = self._checks
        if checks is not None:  # as a server checks a reset (SRV-60, INFO-4)
            obs = checks.observation(obs, "reset")
            info = checks.local_info(info, "reset")
        route = self._route
        if conn.remote and isinstance(route, LocalRoute):
            route.env_plain = _has_tensor_leaf(obs)
        self._episode_id = new_episode_id()
        self._seed = seed
        self._trial = trial_index
        route.begin_episode(self._episode_id, seed)
        self._episode_open = True
        self._steps = 0
        self._reward = 0.0
        self._terminated = self._truncated = False
        self._last_info = info
        self._ep_start = time.perf_counter()
        return obs, info

    def reset(self, *, seed: int | None = None, trial_index: int | None = None) -> tuple[ObsT, Mapping[str, Any]]:
        """Begin a new episode: end the previous one, then reset the env and adapter (EVAL-12).

        Ending the previous episode fires the model's ``on_episode_end``.
        ``trial_index`` is passed as ``options={"trial_index": t}`` only to an env
        that declares the option; otherwise a ``UserWarning`` (DELTA-47).
        """
        self._ensure_open()
        conn = self._connect()
        self._require_single(conn, "reset")
        obs, info = self._begin(conn, seed, trial_index, warn=True)
        if self._view_cfg is not None or self._viewer is not None:
            view = self._attach_view()
            if view is not None:
                self._manual_episode += 1
                view.begin_episode(self._manual_episode, seed, 0, obs)
        return obs, info

    def predict(self, observation: ObsT) -> ActT:
        """Map one env observation to an env-ready action (the model's adapter applied, EVAL-13)."""
        self._ensure_open()
        conn = self._connect()
        self._require_single(conn, "predict")
        return self._route.predict(observation)

    def step(self, action: ActT) -> tuple[ObsT, float, bool, bool, Mapping[str, Any]]:
        """Apply one action to the env; record reward and termination (EVAL-14)."""
        self._ensure_open()
        conn = self._connect()
        self._require_single(conn, "step")
        view = self._viewer
        t0 = time.perf_counter() if view is not None else 0.0
        obs, reward, terminated, truncated, info = self._step(action)
        try:
            r, te, tr = float(reward), bool(terminated), bool(truncated)
        except Exception as exc:
            raise env_failure("step", exc) from None
        self._steps += 1
        self._reward += r
        if view is not None and not view.disabled:
            env_ms = (time.perf_counter() - t0) * 1e3
            if view.step(obs, self._steps, self._reward, r, 0.0, env_ms, action) and not (te or tr):
                tr = True  # the viewer's "end episode": this step reports the episode truncated
            if te or tr:
                view.hud.outcome = outcome_of(te, tr, success_from_info(info))
        self._terminated, self._truncated = te, tr
        self._last_info = info
        return obs, r, te, tr, info

    # -- roles (adapters integration) ----------------------------------------------------

    def reader(self, *items: object) -> Any:
        """Build a read-only, role-addressed view over this env's observations (EVAL-15)."""
        self._ensure_open()
        if not items:
            raise TypeError("reader() needs at least one role or model-input leaf")
        conn = self._connect()
        return adapters.build_reader(conn.contract, *items)

    def read(self, observation: object, item: object) -> Any:
        """One-shot read of a single role from one observation; readers cached per item (EVAL-16)."""
        self._ensure_open()
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
        self._ensure_open()
        conn = self._connect()
        tags = (conn.metadata or {}).get(ENV_TAGS_KEY)
        return adapters.observation_roles(tags)

    def frame_sources(self) -> tuple[str, ...]:
        """The viewer's cameras (DELTA-45, VIEW-3): ``render`` when the env renders RGB, then the
        declared image roles (or, for an env that declares none, its image-like observation leaves)."""
        self._ensure_open()
        self._connect()
        return tuple(s.label for s in view_pkg.discover_sources(self))

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
    ) -> RunResult:
        """Drive whole episodes to completion and return a typed ``RunResult`` (EVAL-20..27).

        ``seeds`` gives a per-episode seed and sets the episode count unless
        ``max_episodes`` is given (``episodes=`` is the 0.1.0 spelling and must then
        agree with ``len(seeds)``). ``max_episode_steps`` / ``max_episode_seconds``
        cap each episode (hitting a cap marks it truncated). ``hooks`` observes the
        loop; ``on_run_end`` fires exactly once, even on an error or interrupt.
        Leaves the session open.
        """
        return run_session(
            self,
            seeds=seeds,
            max_episodes=max_episodes,
            episodes=episodes,
            max_episode_steps=max_episode_steps,
            max_episode_seconds=max_episode_seconds,
            hooks=hooks,
            trial_index_base=trial_index_base,
        )

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close this session: end the open episode, release the route, close what it opened (EVAL-30).

        Idempotent. A model instance you passed in is never closed (DELTA-29); one
        built from a class is. The env is shut down only with ``close_env=True``;
        a connection the session dialed and an env it built from a factory are
        always closed. Every step runs; the first error is re-raised.
        """
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for step in (self._close_view, self._end_open_episode, self._route.close, self._close_model, self._close_conn):
            try:
                step()
            except BaseException as exc:
                errors.append(exc)
        self._read_cache.clear()
        if errors:
            raise errors[0]

    def _close_view(self) -> None:
        """Close the viewer first: the terminal is restored, the HTTP server stopped (VIEW-10)."""
        viewer, self._viewer = self._viewer, None
        self._view_cfg = None
        if viewer is not None:
            viewer.close()

    def _close_model(self) -> None:
        if self._owned_model is not None:
            self._owned_model.close()

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close(close_env=self._close_env)

    def __enter__(self) -> Session[ObsT, ActT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._conn is not None else "unconnected")
        model = getattr(self._route, "model", self._route)
        return f"<Session model={model!r} env={type(self._target).__name__} {state}>"
