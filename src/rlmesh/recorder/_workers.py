"""A ``Recorder.capture`` under ``workers=``: record in the workers, bundle on the driver.

The frames live where the env runs, so each worker records its own episodes with a
:class:`~rlmesh.Recorder` of the same settings (fps, quality, codec ...) and the same
capture arguments, and ships each finished episode's videos and step log back as bytes.
The driver files them into the capture's workload in episode (seed) order, re-laid out
as if one process had recorded them: ``export()`` then writes one bundle that holds
every episode of every worker. ``record=`` is applied per episode index of the whole run
(``"first:N"`` means the run's first N episodes, not each worker's).

This module only plugs the capture into ``rlmesh.eval``'s worker-hooks registry; the
capture itself is unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from ..eval.distributed.hooks import register_worker_hooks
from ._capture import CaptureHooks, RecordPolicy, warn
from ._recorder import Recorder

__all__ = ["CapturePlan"]


@dataclass(frozen=True)
class CapturePlan:
    """What a worker needs to record like the driver's capture (picklable)."""

    recorder: dict[str, Any]
    capture: dict[str, Any]
    policy: RecordPolicy

    def open(self, core: Any) -> _WorkerSide:
        return _WorkerSide(self)


class _WorkerSide:
    def __init__(self, plan: CapturePlan) -> None:
        self.plan = plan
        self.rec = Recorder(**plan.recorder)
        self.frames: Any = self.rec.capture(**plan.capture, record="all")
        self.metrics: Any = None

    def hooks_for(self, index: int, seed: int | None) -> Any:
        if self.plan.policy.wants_frames(index):
            return self.frames
        if self.metrics is None:
            kw = {**self.plan.capture, "cameras": [], "step_log": False}
            self.metrics = self.rec.capture(**kw, record="all")
        return self.metrics

    def collect(self, index: int, result: Any) -> dict[str, Any] | None:
        workload = (
            self.frames._workload
            if self.plan.policy.wants_frames(index)
            else self.metrics._workload
        )
        self.rec._settle()  # the episode's videos are complete
        if not workload.episodes:
            return None
        record = workload.episodes[-1]
        try:
            keep = self.plan.policy.keeps(result)
        except Exception as exc:
            keep = False
            warn(
                f"recorder: record= callable raised {type(exc).__name__}: {exc}; episode {index} kept without media"
            )
        staging = self.rec._staging
        files: dict[str, bytes] = {}
        names = [m.path for m in record.media] + ([record.step_log] if record.step_log else [])
        for rel in names:
            path = staging / rel if staging is not None else None
            if path is None or not path.is_file():
                continue
            if keep:
                files[rel] = path.read_bytes()
            os.unlink(path)  # shipped: the worker's disk stays bounded
        if not keep:
            return {"media": (), "step_log": None, "files": {}}
        return {"media": tuple(record.media), "step_log": record.step_log, "files": files}

    def close(self) -> None:
        self.rec.close()


class _DriverSide:
    """Files the workers' episodes into the driver's capture workload, in episode order."""

    def __init__(self, hooks: CaptureHooks) -> None:
        rec: Recorder = hooks._rec
        if hooks._session is not None:
            warn(
                "recorder: capture(session=...) is ignored with workers=: each worker reads its own env's cameras"
            )
        self.hooks = hooks
        workload = hooks._workload
        self.plan = CapturePlan(
            recorder={
                "fps": rec.fps,
                "quality": rec.quality,
                "codec": rec.codec,
                "drop_frames_ok": rec.drop_frames_ok,
                "queue_frames": rec.queue_frames,
            },
            capture={
                "model": workload.model,
                "env": workload.env,
                "task": workload.task,
                "config": dict(workload.config),
                "cameras": hooks._cameras_arg,
                "video_info_keys": hooks._video_keys,
                "included_in_metrics": hooks._included,
                "step_log": hooks._step_log,
            },
            policy=hooks._policy,
        )

    def absorb(self, result: Any, payload: Any) -> None:
        hooks = self.hooks
        rec: Recorder = hooks._rec
        workload = hooks._workload
        index = len(workload.episodes)
        ep_dir = f"{hooks._base}/ep{index:05d}"
        media = []
        step_log = None
        if payload:
            files = payload.get("files", {})

            def place(rel: str) -> str | None:
                data = files.get(rel)
                if data is None:
                    return None
                new = f"{ep_dir}/{PurePosixPath(rel).name}"
                try:
                    Path(rec._staged(new)).write_bytes(data)
                except OSError as exc:
                    warn(f"recorder: {new} could not be written ({exc}); dropped")
                    return None
                return new

            for ref in payload.get("media", ()):
                new = place(ref.path)
                if new is not None:
                    media.append(replace(ref, path=new))
            if payload.get("step_log"):
                step_log = place(payload["step_log"])
        rec._append(workload, result, index, hooks._included, media, step_log)

    def end(self, result: Any) -> None:
        pass


register_worker_hooks(CaptureHooks, _DriverSide)
