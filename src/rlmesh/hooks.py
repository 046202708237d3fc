"""Ready-made :class:`~rlmesh.RunHooks` for experiment trackers.

:class:`TensorBoard` writes one scalar point per finished episode (return, length,
success, running success rate, duration) and the run's aggregates at its end, through
TensorBoard's own event-file writer (the ``tensorboard`` package, no torch or
TensorFlow needed; ``pip install ".[tensorboard]"``). The dependency is imported when
the hook is constructed, never at ``import rlmesh``.

>>> import rlmesh, rlmesh.hooks                                    # doctest: +SKIP
>>> with rlmesh.hooks.TensorBoard("runs/eval") as tb:              # doctest: +SKIP
...     rlmesh.run(model, "CartPole-v1", seeds=range(20), hooks=tb)

Then ``tensorboard --logdir runs`` shows ``episode/return`` & co. against the episode
number. One hook may serve several runs: its step axis keeps counting.
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any

from .errors import DependencyMissing, RLMeshException
from .eval._hooks import RunContext, RunHooks
from .eval._results import EpisodeResult, RunResult

__all__ = ["TensorBoard"]


class TensorBoard(RunHooks):
    """Log episode metrics of ``rlmesh.run`` / ``Session.run`` to TensorBoard.

    Scalars, against the global episode number (0, 1, 2 ... across every run this hook
    sees):

    - ``{prefix}/return``, ``{prefix}/length`` (steps), ``{prefix}/duration_s``;
    - ``{prefix}/success`` (1.0 / 0.0) when the env reported an outcome
      (``info["is_success"]`` & co.), and ``{prefix}/success_rate``: the running rate
      with the same rule as ``RunResult.success_rate`` (an episode without a reported
      outcome counts ``terminated``);
    - at each run's end ``run/mean_reward``, ``run/success_rate``, ``run/num_episodes``
      and ``run/total_steps``, at the step of the run's last episode.

    Args:
        logdir: Directory of the event file (created if missing).
        prefix: Tag prefix of the per-episode scalars (default ``"episode"``).
        flush_secs: How often the writer flushes in the background; every run end
            flushes too.

    Raises:
        DependencyMissing: (an ``ImportError``) the ``tensorboard`` package is missing.
        RLMeshException: (a ``RuntimeError``) a run starts with a closed hook.
        ValueError: an empty ``logdir`` or ``prefix``.
    """

    def __init__(
        self, logdir: str | os.PathLike[str], *, prefix: str = "episode", flush_secs: float = 10.0
    ) -> None:
        if not str(logdir):
            raise ValueError("TensorBoard logdir must be a directory path, got ''")
        if not prefix or not isinstance(prefix, str):
            raise ValueError(f"TensorBoard prefix must be a non-empty str, got {prefix!r}")
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise DependencyMissing(
                'rlmesh.hooks.TensorBoard needs the tensorboard package: pip install ".[tensorboard]" '
                "(or pip install tensorboard)",
                name="tensorboard",
            ) from None
        self.logdir = os.fspath(logdir)
        self.prefix = prefix
        self._event = Event
        self._summary = Summary
        self._writer: Any = EventFileWriter(self.logdir, flush_secs=flush_secs)
        self.episodes = 0  # the global step: episodes logged so far
        self._succeeded = 0

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        summary = self._summary(
            value=[self._summary.Value(tag=t, simple_value=float(v)) for t, v in values.items()]
        )
        self._writer.add_event(self._event(wall_time=time.time(), step=step, summary=summary))

    # -- RunHooks ------------------------------------------------------------------------------

    def on_run_start(self, context: RunContext) -> None:
        if self._writer is None:
            raise RLMeshException("this TensorBoard hook is closed; make a new one for another run")

    def on_episode_end(self, result: EpisodeResult) -> None:
        step = self.episodes
        self.episodes += 1
        self._succeeded += int(result.succeeded)
        p = self.prefix
        values = {
            f"{p}/return": result.reward,
            f"{p}/length": result.steps,
            f"{p}/duration_s": result.duration_s,
            f"{p}/success_rate": self._succeeded / self.episodes,
        }
        if result.success is not None:
            values[f"{p}/success"] = float(result.success)
        self._scalars(step, values)

    def on_run_end(self, result: RunResult) -> None:
        if self._writer is None:
            return
        if result.episodes:
            rate = (
                sum(1 for e in result.episodes if e.succeeded) / result.num_episodes
            )  # RunResult.success_rate, no warning
            self._scalars(
                max(self.episodes - 1, 0),
                {
                    "run/mean_reward": result.mean_reward,
                    "run/success_rate": rate,
                    "run/num_episodes": result.num_episodes,
                    "run/total_steps": result.total_steps,
                },
            )
        self._writer.flush()

    # -- lifetime --------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything logged so far to disk."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TensorBoard(logdir={self.logdir!r}, episodes={self.episodes})"
