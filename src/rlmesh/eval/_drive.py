"""``Drive``: what a :class:`~rlmesh.Session` drives -- a route, an env side, the observers, the open episode.

The session is the public face; the drive loops (``_loop``, ``_vector``) and the
run's ending (``_budget.finish_run``) talk to this object and to its three
protocols only: the env side (:class:`~rlmesh.eval._envside.EnvSide`, opened once
on first use), the route (:class:`rlmesh.models._route.Route`) and the observer
list (:class:`~rlmesh.eval._observers.ObserverList`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import view as view_pkg
from .._ids import new_local_episode_id
from ..models._route import Route, as_route
from ..models._warn import user_stacklevel
from ._envside import EnvSide
from ._episode import Episode
from ._observers import HooksObserver, Observer, ObserverList, ViewerObserver
from ._targets import open_target
from ._trial import ENV_RESET_OPTIONS_KEY, TRIAL_INDEX, declares_reset_option

if TYPE_CHECKING:
    from ._hooks import RunHooks

__all__ = ["Drive"]


class Drive:
    """A model bound to one env target: route, lazily opened env side, viewer, open episode.

    Attributes:
        route: The session's :class:`~rlmesh.models._route.Route`.
        episode: The current (or last) episode's books; a run leaves the last one here.
        episode_open: Whether the route holds an open episode (``end_open_episode`` ends it).
        closed: Whether the session was closed.
    """

    def __init__(
        self,
        route: Any,
        target: Any,
        kind: str,
        *,
        close_env: bool,
        workflow_edition: str | None,
        owned_model: Any = None,
        view: Any = None,
    ) -> None:
        self.given_route = route
        self.route: Route = as_route(route)
        self.target = target
        self.kind = kind
        self.close_env = bool(close_env)
        self.workflow_edition = workflow_edition
        self.owned_model = owned_model
        self.env: EnvSide | None = None
        self.closed = False
        self.episode = Episode()
        self.episode_open = False
        self.view_cfg = view  # a normalized rlmesh.View or None (VIEW-2)
        #: The terminal viewer owns the terminal: no progress line is drawn under it.
        self.terminal_view = getattr(view, "backend", None) in ("terminal", "both")
        self.viewer: ViewerObserver | None = None
        self.manual_episode = -1

    # -- the env side ------------------------------------------------------------------------

    def ensure_open(self) -> None:
        if self.closed:
            raise RuntimeError("session is closed; open a new one with rlmesh.session(model, env)")

    def connect(self) -> EnvSide:
        """Open the env on first use: dial/build, contract, checks, route bound (EVAL-10)."""
        env = self.env
        if env is not None:
            return env
        conn = open_target(
            self.target,
            self.kind,
            workflow_edition=self.workflow_edition,
            render=self.view_cfg is not None,  # a Gymnasium id made here renders for the viewer
        )
        try:
            env = EnvSide(conn)
            self.route.bind(env, lanes=env.lanes)
        except BaseException:
            if conn.dialed or conn.built:  # DELTA-48: close what we opened before propagating
                try:
                    conn.close(close_env=False)
                except Exception:
                    pass
            raise
        self.env = env
        return env

    def render_target(self) -> Any:
        """The object whose ``render()`` shows the env (connects if needed), or ``None``."""
        if self.env is None:
            if self.closed:
                return None
            try:
                self.connect()
            except Exception:
                return None
        return None if self.env is None else self.env.render_target

    # -- episodes ----------------------------------------------------------------------------

    def end_open_episode(self) -> None:
        if self.episode_open:
            self.episode_open = False
            self.route.end_episode(self.episode.id)

    def reset_options(
        self, env: EnvSide, trial_index: int | None, *, warn: bool
    ) -> dict[str, Any] | None:
        if trial_index is None:
            return None
        if declares_reset_option(env.metadata, TRIAL_INDEX):
            return {TRIAL_INDEX: int(trial_index)}
        if warn:
            warnings.warn(
                'trial_index was given but this env declares no "trial_index" reset option '
                f"(metadata '{ENV_RESET_OPTIONS_KEY}'); resetting without it",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        return None

    def begin(
        self, seed: int | None, trial_index: int | None, *, warn: bool
    ) -> tuple[Any, Mapping[str, Any]]:
        """End the open episode, reset the single env and begin the route's next episode."""
        self.end_open_episode()
        env = self.connect()
        options = self.reset_options(env, trial_index, warn=warn)
        obs, info = env.reset(seed, options)
        episode = Episode(new_local_episode_id(), seed, trial_index, info)
        self.route.begin_episode(episode.id, seed)
        self.episode = episode
        self.episode_open = True
        episode.start = time.perf_counter()  # the episode's clock starts when its reset returned
        return obs, info

    # -- observers ---------------------------------------------------------------------------

    def attach_view(self, context: Any) -> ViewerObserver | None:
        """The session's live viewer, started on first use after connect; ``None`` when off (VIEW-3, VIEW-9)."""
        viewer = self.viewer
        if viewer is not None:
            return viewer if viewer.live else None
        if self.view_cfg is None:
            return None
        cfg, self.view_cfg = self.view_cfg, None  # one attempt per session: a failure warns once
        lanes = self.env.num_envs if self.env is not None else 1
        opened = view_pkg.open_viewer(cfg, context, route=self.route)
        self.viewer = None if opened is None else ViewerObserver(opened, lanes)
        return self.viewer

    def observers(self, hooks: RunHooks | None, context: Any) -> ObserverList:
        """The run's observer list: the user's hooks, then the live viewer (each only when present)."""
        out: list[Observer] = []
        if hooks is not None:
            out.append(HooksObserver(hooks))
        viewer = self.attach_view(context)
        if viewer is not None:
            out.append(viewer)
        return ObserverList(out)

    # -- teardown ----------------------------------------------------------------------------

    def close_view(self) -> None:
        """Close the viewer first: the terminal is restored, the HTTP server stopped (VIEW-10)."""
        viewer, self.viewer = self.viewer, None
        self.view_cfg = None
        if viewer is not None:
            viewer.viewer.close()

    def close_model(self) -> None:
        if self.owned_model is not None:
            self.owned_model.close()

    def close_env_side(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close(close_env=self.close_env)

    def close(self) -> list[BaseException]:
        """Close the viewer, end the open episode, release the route, the model, the env; the errors, in order."""
        self.closed = True
        errors: list[BaseException] = []
        for step in (
            self.close_view,
            self.end_open_episode,
            self.route.close,
            self.close_model,
            self.close_env_side,
        ):
            try:
                step()
            except BaseException as exc:
                errors.append(exc)
        return errors
