"""``MetaWorldEnv``: one Meta-World task as an rlmesh env whose episode is fixed by its reset seed.

Meta-World's own Gymnasium envs are seeded once, at construction, and draw the next goal
from that stream at each reset, so episode *k* depends on every reset before it. An
evaluation that spreads episodes over workers, or resumes half-way, needs episode *k* to
depend on its seed alone: here ``reset(seed=s)`` reseeds the task's generator with ``s``
and draws the object and goal positions from it (Meta-World's own sampling, the same
distribution its benchmarks use), and resets the physics from scratch. ``reset()``
without a seed continues the stream.

Observation (a Dict): ``state`` (float64[39], Meta-World's vector: hand xyz, gripper
opening, object poses, the previous frame of those, the goal xyz), ``instruction`` (the
task in words) and, with a camera, ``image`` (uint8[size, size, 3], upright). Action:
float32[4] in [-1, 1] (hand xyz delta, gripper). ``info["success"]`` is Meta-World's
success flag; with ``terminate_on_success`` (the default) an episode ends at its first
success, so the final step's ``success`` is the episode's outcome.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from ..errors import DependencyMissing
from ..spaces import Box, Dict, Text
from ._gl import gl_error, setup_headless_gl

__all__ = ["MAX_EPISODE_STEPS", "MetaWorldEnv", "instruction_for", "require_metaworld"]

#: Meta-World's task horizon (``max_path_length``).
MAX_EPISODE_STEPS = 500
INSTALL_HINT = (
    'pip install metaworld mujoco (the "metaworld" extra of rlmesh-py: Meta-World 3.x and '
    "MuJoCo); or let rlmesh.suites.run start the suite in a sandbox (sandbox='venv')"
)


def require_metaworld(*, rendering: bool = False) -> Any:
    """Import ``metaworld`` (after choosing a headless GL backend) or raise with the install hint."""
    if rendering:
        setup_headless_gl()
    else:
        try:
            setup_headless_gl()  # harmless for state-only envs; a later render() needs it
        except DependencyMissing:
            pass
    try:
        import metaworld
    except ImportError as exc:
        what = (
            "Meta-World is not installed"
            if getattr(exc, "name", None) in (None, "metaworld")
            else f"importing Meta-World failed: a dependency of it is missing ({exc})"
        )
        raise DependencyMissing(f"{what}; {INSTALL_HINT}", name="metaworld") from None
    return metaworld


def instruction_for(task: str) -> str:
    """The task in words, the instruction a language-conditioned model gets.

    >>> instruction_for("button-press-topdown-v3")
    'button press topdown'
    """
    name = task.rsplit("-v", 1)[0] if task.rsplit("-v", 1)[-1].isdigit() else task
    return name.replace("-", " ")


class MetaWorldEnv:
    """One Meta-World task; see the module docstring. Built by ``rlmesh.suites.metaworld``."""

    def __init__(
        self,
        task: str,
        *,
        camera: str | None = None,
        image_size: int = 128,
        render_every: int = 1,
        max_episode_steps: int = MAX_EPISODE_STEPS,
        terminate_on_success: bool = True,
    ) -> None:
        if image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {image_size}")
        if render_every < 1:
            raise ValueError(f"render_every must be >= 1, got {render_every}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        metaworld = require_metaworld(rendering=camera is not None)
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS, ML1_ARGS_KWARGS
        from metaworld.types import Task

        if task not in ALL_V3_ENVIRONMENTS:
            raise ValueError(
                f"unknown Meta-World task {task!r} (Meta-World {getattr(metaworld, '__version__', '?')}); "
                f"one of rlmesh.suites.metaworld.MT50, e.g. 'reach-v3'"
            )
        cls = ALL_V3_ENVIRONMENTS[task]
        sim: Any = cls(
            render_mode="rgb_array",
            camera_name=camera or "corner",
            width=image_size,
            height=image_size,
        )
        spec: Any = ML1_ARGS_KWARGS[task]
        kwargs = {k: v for k, v in spec["kwargs"].items() if k != "task_id"}
        sim.set_task(  # Meta-World's own task record: goal observable, as in its MT benchmarks
            Task(
                env_name=task,
                data=pickle.dumps(
                    dict(
                        kwargs,
                        rand_vec=np.asarray(sim._random_reset_space.low),
                        env_cls=cls,
                        partially_observable=False,
                    )
                ),
            )
        )
        sim._freeze_rand_vec = False  # draw the goal at each reset ...
        sim.seeded_rand_vec = True  # ... from the generator reset(seed=) reseeds
        if max_episode_steps > sim.max_path_length:
            sim.max_path_length = max_episode_steps
        self.sim: Any = sim
        self.task = task
        self.camera = camera
        self.image_size = image_size
        self.render_every = render_every
        self.max_episode_steps = max_episode_steps
        self.terminate_on_success = terminate_on_success
        self.instruction = instruction_for(task)
        self.render_mode = "rgb_array"
        self.metadata: dict[str, Any] = {
            "render_modes": ["rgb_array"],
            "render_fps": int(sim.metadata.get("render_fps", 80)),
            "rlmesh.suite": "metaworld",
            "rlmesh.suite.task": task,
        }
        leaves: dict[str, Any] = {"state": Box(-np.inf, np.inf, (39,), "float64")}
        if camera is not None:
            leaves["image"] = Box(0, 255, (image_size, image_size, 3), "uint8")
        leaves["instruction"] = Text(64, min_length=1)
        self.observation_space = Dict(leaves)
        self.action_space = Box(-1.0, 1.0, (4,), "float32")
        self._steps = 0
        self._frame: np.ndarray[Any, Any] | None = None

    # -- the env -------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        sim = self.sim
        if seed is not None:
            sim.seed(int(seed))  # the goal and object positions come from this seed alone
        sim._did_see_sim_exception = False
        state, _ = sim.reset()
        self._steps = 0
        info: dict[str, Any] = {"task": self.task}
        if seed is not None:
            info["seed"] = int(seed)
        return self._observation(state, fresh=True), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        state, reward, _, _, raw = self.sim.step(np.asarray(action, dtype=np.float32))
        self._steps += 1
        success = bool(raw.get("success", 0.0))
        info = {k: float(v) for k, v in raw.items() if k != "success"}
        info["success"] = success
        terminated = success and self.terminate_on_success
        truncated = not terminated and self._steps >= self.max_episode_steps
        fresh = self._steps % self.render_every == 0
        return self._observation(state, fresh=fresh), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray[Any, Any]:
        """The camera's current frame (``corner`` for a state-only env), upright, uint8 HxWx3."""
        try:
            frame = self.sim.render()
        except Exception as exc:  # no usable GL context: say which package fixes it
            if "mujoco" in type(exc).__module__ or "OpenGL" in type(exc).__module__:
                raise gl_error(f"{type(exc).__name__}: {exc}") from exc
            raise
        return np.ascontiguousarray(
            frame[::-1, ::-1]
        )  # Meta-World's cameras are mounted upside down

    def close(self) -> None:
        sim, self.sim = getattr(self, "sim", None), None
        if sim is not None:
            sim.close()

    # -- helpers -------------------------------------------------------------------------------

    def _observation(self, state: np.ndarray[Any, Any], *, fresh: bool) -> dict[str, Any]:
        obs: dict[str, Any] = {"state": state}
        if self.camera is not None:
            if fresh or self._frame is None:
                self._frame = self.render()
            obs["image"] = self._frame
        obs["instruction"] = self.instruction
        return obs

    def __repr__(self) -> str:
        cam = f", camera={self.camera!r}, image_size={self.image_size}" if self.camera else ""
        return f"MetaWorldEnv({self.task!r}{cam})"
