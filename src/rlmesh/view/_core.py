"""The viewer attached to one session: mailboxes, the pump thread, run control (VIEW-6..10).

Threads:

- the **run's thread** calls :meth:`Viewer.begin_episode`, :meth:`Viewer.step` and
  :meth:`Viewer.end_episode`. A step updates the HUD numbers and, only when the
  fps throttle says a frame is due (VIEW-6), fetches the wanted cameras and drops
  the frame *references* into one-slot mailboxes (one per camera and lane; a newer
  frame replaces an unread one). It never normalises, encodes or writes.
- the **pump thread** wakes on a new frame (or every 100 ms), normalises frames
  (VIEW-7), JPEG/PNG-encodes each once for every HTTP client (VIEW-16, P-6) and
  hands the selected one to the terminal; it also pushes the HUD and the run's
  statistics to the page.
- each backend has its own threads (the terminal's key reader, the HTTP server's
  event loop). A slow or stalled browser tab skips frames in its own sender and
  never reaches back to the run.

Run control (pause, single step, skip, quit) is a condition variable: a paused run
blocks in :meth:`Viewer.step` at a step boundary without spinning; quit raises
:class:`ViewerQuit` (a ``KeyboardInterrupt``) in the run's thread at the next step
boundary (the terminal takes Ctrl-C as quit while it holds the TTY in raw mode). The
drive loop takes it as "stop here": the run ends normally and returns the
``RunResult`` of the finished episodes (the one in progress is dropped).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

from .._termtext import term_safe
from ._faults import RENDER_FIX, missing_dependency
from ._hud import EMA_KEEP, HudState, RunStats, outcome_of
from ._plot import flatten_action, line_plot_svg
from ._sources import FrameSource, normalize_frame

__all__ = ["MAX_LANES", "Viewer", "ViewerError", "ViewerQuit", "warn_view"]

#: Lanes of a vector env the viewer shows (the first ``MAX_LANES``).
MAX_LANES = 16

_NEW = 1 - EMA_KEEP


class ViewerError(RuntimeError):
    """A viewer backend could not start (reported as a warning, never raised into a run)."""


class ViewerQuit(KeyboardInterrupt):
    """The user pressed "quit" in a viewer: raised at a step boundary of the run's thread.

    The drive loop recognises it (``rlmesh_quit``) and returns the finished episodes'
    ``RunResult`` instead of propagating; anything else catching ``KeyboardInterrupt``
    still sees an interrupt.
    """

    rlmesh_quit = True


def warn_view(message: str) -> None:
    """Emit ``"rlmesh view: <message>"`` as a ``UserWarning`` that can never raise (VIEW-9)."""
    try:
        warnings.warn(
            f"rlmesh view: {term_safe(message, newlines=True)}", UserWarning, stacklevel=3
        )
    except Exception:  # -W error: a viewer warning must not break the run
        pass


def _ema(old: float, new: float) -> float:
    return new if old == 0.0 else old * EMA_KEEP + new * _NEW


class Viewer:
    """A live viewer bound to one run: feed it from the run's thread, show it elsewhere.

    Not constructed by users: ``rlmesh.run(..., view=...)`` / ``rlmesh.session(..., view=...)``
    build one through :func:`rlmesh.view.open_viewer`.
    """

    def __init__(
        self,
        sources: Sequence[FrameSource],
        *,
        fps: int,
        lanes: int = 1,
        selected: int = 0,
        route: Any = None,
    ) -> None:
        self.sources = tuple(sources)
        self.labels = tuple(s.label for s in self.sources)
        self.lanes = max(1, min(int(lanes), MAX_LANES))
        self.period = 1.0 / float(fps)
        self.fps_target = fps
        self.hud = HudState()
        self.stats = RunStats()
        self.backends: list[Any] = []
        self.route = route
        self.closed = False
        self.disabled = False
        # selection (written by control threads, read by the run's thread)
        self.selected = selected if 0 <= selected < len(self.sources) else 0
        self.selected_lane = 0
        self.all_frames = False  # an HTTP client wants every camera and lane
        self._wanted: list[tuple[int, int]] = [(self.selected, 0)]
        # mailboxes: (source, lane) -> (raw frame, feed time.time(), seq)
        self._slots: dict[tuple[int, int], tuple[Any, float, int]] = {}
        self._slot_lock = threading.Lock()
        self._wake = threading.Event()
        self._seq = 0
        self._next_draw = 0.0
        self._last_obs: Any = None
        # run control
        self._cv = threading.Condition()
        self._gate = False
        self.paused = False
        self._steps_allowed = 0
        self._skip = False
        self._quit = False
        self._regrab = False
        self._pump: threading.Thread | None = None
        self._draw_t = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the pump thread (backends are started by :func:`open_viewer`)."""
        self.hud.started = time.perf_counter()
        self._pump = threading.Thread(target=self._pump_loop, name="rlmesh-view-pump", daemon=True)
        self._pump.start()

    def close(self) -> None:
        """Stop the pump and every backend (terminal restored, HTTP server stopped; VIEW-10). Idempotent."""
        if self.closed:
            return
        self.closed = True
        with self._cv:
            self._gate = False
            self._cv.notify_all()
        self._wake.set()
        pump = self._pump
        if pump is not None and pump is not threading.current_thread():
            pump.join(timeout=5.0)
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:
                warn_view(f"error while closing the {backend.name} backend: {exc}")

    def _disable(self, why: str, exc: BaseException) -> None:
        """A feed failure: one warning, the viewer closed, later feeds silent no-ops (VIEW-9)."""
        if self.disabled:
            return
        self.disabled = True
        fix = ""
        if missing_dependency(exc):  # pygame and friends: say what to install, and where
            fix = f"; to fix: {RENDER_FIX}, or run without view="
        warn_view(f"disabled after {why} error: {type(exc).__name__}: {exc}{fix}")
        self.close()

    # -- the run's thread --------------------------------------------------------------------

    def begin_episode(
        self, episode: int, seed: int | None, episodes: int, observation: Any
    ) -> None:
        """A new episode started with ``observation`` (fed like a step, VIEW-6)."""
        if self.disabled:
            return
        hud = self.hud
        hud.episode = episode + 1
        hud.episodes = episodes
        hud.seed = -1 if seed is None else int(seed)
        hud.step = 0
        hud.reward = 0.0
        hud.outcome = ""
        hud.last_step_t = 0.0
        self.stats.rewards.clear()
        self.stats.actions.clear()
        self.stats.version += 1
        now = time.perf_counter()
        self._last_obs = observation
        self._next_draw = now  # a fresh episode always shows its first frame
        self._grab(observation, now)

    def step(
        self,
        observation: Any,
        steps: int,
        ret: float,
        reward: float,
        model_ms: float,
        env_ms: float,
        action: Any = None,
    ) -> bool:
        """One env step happened; returns ``True`` when the user asked to skip this episode.

        ``observation`` is what the env returned (the next observation), ``steps``
        and ``ret`` the episode's step count and return so far. Blocks while the
        run is paused; raises :class:`ViewerQuit` when the user quit.
        """
        if self.disabled:
            return False
        now = time.perf_counter()
        hud = self.hud
        route = self.route
        if route is not None:
            pos = getattr(route, "chunk_pos", 0)
            hud.chunk_pos, hud.chunk_len = pos, getattr(route, "chunk_len", 0)
            if pos <= 1:  # the forward ran on this step (EVAL-70: replay steps do not count)
                hud.model_ms = _ema(hud.model_ms, model_ms)
        else:
            hud.model_ms = _ema(hud.model_ms, model_ms)
        hud.env_ms = _ema(hud.env_ms, env_ms)
        last = hud.last_step_t
        if last:
            gap = now - last
            if gap > 0:
                hud.sps = _ema(hud.sps, 1.0 / gap)
        hud.last_step_t = now
        hud.step = steps
        hud.reward = ret
        self._last_obs = observation
        stats = self.stats
        stats.rewards.append(reward)
        if action is not None:
            stats.actions.append(action)
        stats.steps_total += 1
        if now >= self._next_draw:
            self._grab(observation, now)
        if self._gate:
            return self._control()
        return False

    def end_episode(self, result: Any) -> None:
        """An episode ended: its outcome to the HUD, a row to the episode table (VIEW-8)."""
        if self.disabled:
            return
        outcome = outcome_of(bool(result.terminated), bool(result.truncated), result.success)
        self.hud.outcome = outcome
        self.stats.add_episode(result, outcome)
        self._wake.set()

    def _grab(self, observation: Any, now: float) -> None:
        """Fetch the wanted cameras into their mailboxes (the only frame work on the run's thread)."""
        self._next_draw = now + self.period
        stamp = time.time()
        try:
            got: list[tuple[tuple[int, int], Any]] = []
            batch: dict[int, Any] = {}
            for key in self._wanted:
                src = self.sources[key[0]]
                if src.fetch_all is not None and self.all_frames:  # every lane in one call
                    if key[0] not in batch:
                        batch[key[0]] = src.fetch_all(observation)
                    frames = batch[key[0]]
                    got.append((key, frames[key[1]] if key[1] < len(frames) else None))
                else:
                    got.append((key, src.fetch(observation, key[1])))
        except Exception as exc:
            self._disable("feed", exc)
            return
        self._seq += 1
        seq = self._seq
        with self._slot_lock:
            for key, frame in got:
                if frame is not None:
                    self._slots[key] = (frame, stamp, seq)
        self._wake.set()

    def _control(self) -> bool:
        """Honour pause / single step / skip / quit at a step boundary (no busy wait)."""
        with self._cv:
            if self.paused and not (self._quit or self._skip):
                if self._steps_allowed == 0:
                    self._wait_while_paused()
                if self._steps_allowed > 0 and not (self._quit or self._skip):
                    self._steps_allowed -= 1
                    return False
            if self._quit:
                raise ViewerQuit("rlmesh view: quit requested")
            if self._skip:
                self._skip = False
                self._refresh_gate()
                return True
            return False

    def _wait_while_paused(self) -> None:
        """Hold the run (``self._cv`` held) until resumed, stepped, skipped, quit or closed."""
        self.hud.paused = True
        self._wake.set()
        self._cv.notify_all()  # observers waiting for "the run is paused"
        while (
            self.paused
            and self._steps_allowed == 0
            and not (self._skip or self._quit or self.closed)
        ):
            if self._regrab:  # a new camera chosen while paused: show it now
                self._regrab = False
                self._cv.release()
                try:
                    self._grab(self._last_obs, time.perf_counter())
                finally:
                    self._cv.acquire()
                continue
            self._cv.wait()
        self.hud.paused = self.paused

    def _refresh_gate(self) -> None:
        self._gate = (self.paused or self._skip or self._quit) and not self.closed

    # -- control (any thread) ------------------------------------------------------------------

    def request(self, op: str, **kw: Any) -> bool:
        """Apply a control request from a key or the page: ``select``, ``next``, ``prev``,
        ``lane``, ``pause``, ``resume``, ``toggle``, ``step``, ``skip``, ``quit``. Returns
        whether ``op`` was understood."""
        if op in ("select", "next", "prev", "lane"):
            n = len(self.sources)
            if op == "select":
                i = kw.get("source", kw.get("i"))
                if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n:
                    self.selected = i
            elif op == "next" and n:
                self.selected = (self.selected + 1) % n
            elif op == "prev" and n:
                self.selected = (self.selected - 1) % n
            lane = kw.get("lane")
            if isinstance(lane, int) and not isinstance(lane, bool) and 0 <= lane < self.lanes:
                if (
                    lane != self.selected_lane
                ):  # the plots follow the watched lane from its next step
                    self.stats.rewards.clear()
                    self.stats.actions.clear()
                self.selected_lane = lane
            self._rewant()
            return True
        with self._cv:
            if op == "pause":
                self.paused = True
            elif op == "resume":
                self.paused = False
                self._steps_allowed = 0
            elif op == "toggle":
                self.paused = not self.paused
                self._steps_allowed = 0
            elif op == "step":
                if self.paused:
                    self._steps_allowed += 1
                else:
                    self.paused = True  # a step while running pauses after the next step
                    self._steps_allowed = 1
            elif op == "skip":
                self._skip = True
            elif op == "quit":
                self._quit = True
            else:
                return False
            self.hud.paused = self.paused
            self._refresh_gate()
            self._cv.notify_all()
        self._wake.set()
        return True

    @property
    def quit_requested(self) -> bool:
        return self._quit

    def set_all_frames(self, on: bool) -> None:
        """Whether every camera and lane is fetched (an HTTP client is watching), or only the selected one."""
        self.all_frames = on
        self._rewant()

    def _rewant(self) -> None:
        if self.all_frames:
            wanted = [(s, lane) for s in range(len(self.sources)) for lane in range(self.lanes)]
        else:
            wanted = [(self.selected, self.selected_lane)]
        self._wanted = wanted
        self._next_draw = 0.0  # show the new choice at the next step
        if self.paused:
            with self._cv:
                self._regrab = True
                self._cv.notify_all()

    # -- pump thread ---------------------------------------------------------------------------

    def _take(self) -> dict[tuple[int, int], tuple[Any, float, int]]:
        with self._slot_lock:
            slots, self._slots = self._slots, {}
        return slots

    def _pump_loop(self) -> None:
        last_meta = 0.0
        while not self.closed:
            self._wake.wait(0.1)
            self._wake.clear()
            if self.closed:
                break
            slots = self._take()
            now = time.perf_counter()
            for key, (raw, stamp, seq) in slots.items():
                try:
                    frame = normalize_frame(raw)
                except Exception:
                    frame = None
                if frame is None:
                    continue
                if key == (self.selected, self.selected_lane):
                    if self._draw_t:
                        gap = now - self._draw_t
                        if gap > 0:
                            self.hud.fps = _ema(self.hud.fps, 1.0 / gap)
                    self._draw_t = now
                    self.hud.height, self.hud.width = int(frame.shape[0]), int(frame.shape[1])
                for backend in self.backends:
                    try:
                        backend.frame(key, frame, stamp, seq)
                    except Exception as exc:
                        warn_view(
                            f"{backend.name} backend failed to draw: {type(exc).__name__}: {exc}"
                        )
            if now - last_meta >= 0.1:
                last_meta = now
                for backend in self.backends:
                    try:
                        backend.meta(now)
                    except Exception:
                        pass

    # -- documents for the backends ------------------------------------------------------------

    def hud_doc(self) -> dict[str, Any]:
        return self.hud.snapshot(time.perf_counter())

    def sources_doc(self) -> dict[str, Any]:
        return {
            "sources": list(self.labels),
            "selected": self.selected,
            "lanes": self.lanes,
            "lane": self.selected_lane,
        }

    def series_doc(self) -> dict[str, Any]:
        """The reward and action series of the watched lane's episode, and both plots as SVG.

        ``reward_svg`` / ``action_svg`` are complete ``<svg>`` elements with axes and a
        legend (:func:`line_plot_svg`); the action plot shows the first 8 numbers of the
        action (a Dict/Tuple action flattened, ``action_names`` naming each).
        """
        rewards = [round(float(r), 4) for r in list(self.stats.rewards)]
        actions: list[list[float]] = []
        names: list[str] = []
        for a in list(self.stats.actions):
            try:
                values, these = flatten_action(a)
            except Exception:
                continue
            if these != names:  # the first action, or the layout changed: plot from here on
                actions, names = [], these
            actions.append([round(x, 4) for x in values])
        step = self.hud.step
        label = f" (lane {self.selected_lane})" if self.lanes > 1 else ""
        per_dim = [[row[k] for row in actions] for k in range(len(names))]
        return {
            "reward": rewards,
            "actions": actions,
            "action_names": names,
            "lane": self.selected_lane,
            "reward_svg": line_plot_svg(
                [rewards],
                ["reward per step"],
                x0=max(1, step - len(rewards) + 1),
                y_label="reward",
                title=f"reward per step{label}",
            ),
            "action_svg": line_plot_svg(
                per_dim,
                names,
                x0=max(1, step - len(actions) + 1),
                y_label="action",
                title=f"action{label}",
            ),
        }

    def episodes_doc(self) -> dict[str, Any]:
        return {"rows": self.stats.rows[-200:], **self.stats.summary()}
