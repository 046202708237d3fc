"""Meta-World (MuJoCo) as an rlmesh suite: tasks, the env factory, the seed schedule, the scripted baseline.

Importing this module needs neither Meta-World nor MuJoCo; building an env or the scripted
policy does (``pip install ".[metaworld]"`` from a clone), or run the suite in a sandbox
(``rlmesh.suites.run(..., sandbox="venv")``).

- :data:`MT10`, :data:`MT50` (task-name tuples) and :data:`MT1_TASKS` (every task: MT1 is
  one task at a time, so its tasks are MT50's);
- :func:`factory` -> :class:`MetaWorld`, an :class:`rlmesh.EnvFactory` with one catalog
  variant per task and params ``task``, ``camera`` (``None`` for state only, or one of
  :data:`CAMERAS`), ``image_size``, ``render_every``, ``max_episode_steps`` (500) and
  ``terminate_on_success``; its tags map ``state`` (hand position, gripper), ``image``
  (primary camera, or the wrist camera for ``gripperPOV``) and ``instruction`` (the task
  in words) to a model's roles, and the action to a hand-position delta plus a gripper;
- :func:`make_env` (one task's env; picklable with :func:`functools.partial`);
- :func:`scripted` -> a :class:`rlmesh.models.NumpyModel` wrapping Meta-World's expert
  policy for the task: the baseline to run first, and the suite's self-check;
- :func:`seeds`: the seed schedule. Episode *k* of every task is ``reset(seed=k)``
  (``k = 0 .. episodes_per_task - 1``) and the env draws that episode's object and goal
  positions from its seed alone, so a run gives the same episodes every time, in one
  process, served, or spread over workers.

Example:
    >>> from rlmesh.suites import metaworld
    >>> len(metaworld.MT10), metaworld.MT10[0], len(metaworld.MT50)
    (10, 'reach-v3', 50)
    >>> metaworld.seeds("push-v3", 3)
    [0, 1, 2]
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from ..adapters import (
    ACTION_DELTA_POS,
    ACTION_GRIPPER,
    EEF_POS,
    GRIPPER_POS,
    IMAGE_PRIMARY,
    IMAGE_WRIST,
    INSTRUCTION,
    Action,
    Actuator,
    EnvTags,
    Field,
    ImageTag,
    Split,
    TextTag,
)
from ..authoring import EnvFactory, Param, ParamSpec, Variant, build_env
from ..models import NumpyModel
from ..models._sentinels import NO_ADAPTER
from ._mwenv import MAX_EPISODE_STEPS, MetaWorldEnv, instruction_for, require_metaworld

__all__ = [
    "CAMERAS",
    "MAX_EPISODE_STEPS",
    "MT1_TASKS",
    "MT10",
    "MT50",
    "PACKAGES",
    "MetaWorld",
    "MetaWorldEnv",
    "Scripted",
    "factory",
    "instruction_for",
    "make_env",
    "scripted",
    "seeds",
]

#: The ten MT10 tasks, in Meta-World's order.
MT10: tuple[str, ...] = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)

#: The fifty MT50 tasks, in Meta-World's order.
MT50: tuple[str, ...] = (
    "assembly-v3", "basketball-v3", "bin-picking-v3", "box-close-v3",
    "button-press-topdown-v3", "button-press-topdown-wall-v3", "button-press-v3",
    "button-press-wall-v3", "coffee-button-v3", "coffee-pull-v3", "coffee-push-v3",
    "dial-turn-v3", "disassemble-v3", "door-close-v3", "door-lock-v3", "door-open-v3",
    "door-unlock-v3", "hand-insert-v3", "drawer-close-v3", "drawer-open-v3",
    "faucet-open-v3", "faucet-close-v3", "hammer-v3", "handle-press-side-v3",
    "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3", "lever-pull-v3",
    "pick-place-wall-v3", "pick-out-of-hole-v3", "pick-place-v3", "plate-slide-v3",
    "plate-slide-side-v3", "plate-slide-back-v3", "plate-slide-back-side-v3",
    "peg-insert-side-v3", "peg-unplug-side-v3", "soccer-v3", "stick-push-v3",
    "stick-pull-v3", "push-v3", "push-wall-v3", "push-back-v3", "reach-v3",
    "reach-wall-v3", "shelf-place-v3", "sweep-into-v3", "sweep-v3", "window-open-v3",
    "window-close-v3",
)  # fmt: skip

#: Every task (an MT1 benchmark is one of these).
MT1_TASKS: tuple[str, ...] = MT50

#: Camera choices: ``None`` (state only) and Meta-World's named cameras.
CAMERAS: tuple[str | None, ...] = (
    None,
    "corner",
    "corner2",
    "corner3",
    "corner4",
    "topview",
    "behindGripper",
    "gripperPOV",
)

#: What a sandbox installs to run the suite (``SandboxBuild(packages=PACKAGES)``).
PACKAGES: tuple[str, ...] = (
    "metaworld>=3.1,<4",
    "mujoco>=3",
    "packaging",
)  # metaworld imports packaging undeclared

_ACTION = Action(
    Actuator(ACTION_DELTA_POS, dim=3, range=(-1.0, 1.0)),
    Actuator(ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
    clip=(-1.0, 1.0),
)
_STATE = Split(Field(EEF_POS, 3), Field(GRIPPER_POS, 1), Field(dim=35))


def _tags(camera: str | None) -> EnvTags:
    obs: dict[str, Any] = {"state": _STATE}
    if camera is not None:
        obs["image"] = ImageTag(IMAGE_WRIST if camera == "gripperPOV" else IMAGE_PRIMARY)
    obs["instruction"] = TextTag(INSTRUCTION)
    return EnvTags(observation=obs, action=_ACTION)


class MetaWorld(EnvFactory):
    """Meta-World's tasks as one :class:`rlmesh.EnvFactory` (a catalog variant per task).

    ``rlmesh serve rlmesh.suites.metaworld:MetaWorld --param task=push-v3 --param camera=corner``
    serves one task; ``rlmesh describe rlmesh.suites.metaworld:MetaWorld`` lists them.
    """

    params = ParamSpec(
        Param("task", "enum", choices=MT50, description="the Meta-World task", group="task"),
        Param(
            "camera",
            "enum",
            choices=CAMERAS,
            description="None: state only; else the camera rendered into obs['image']",
            group="camera",
        ),
        Param("image_size", int, description="camera image height = width, pixels", group="camera"),
        Param(
            "render_every",
            int,
            description="render the camera every k steps (the image repeats in between)",
            group="camera",
        ),
        Param("max_episode_steps", int, description="truncate after N steps (Meta-World: 500)"),
        Param("terminate_on_success", bool, description="end the episode at its first success"),
    )
    tag_params = ("camera",)
    tags = _tags(None)

    @classmethod
    def tags_for(cls, **params: Any) -> EnvTags:
        return _tags(params.get("camera"))

    @classmethod
    def enumerate_variants(cls) -> list[Variant]:
        return [Variant(t, {"task": t}, name=t, instruction=instruction_for(t)) for t in MT50]

    def make(  # type: ignore[override]  # the declared params, not **kwargs
        self,
        task: str = "reach-v3",
        camera: str | None = None,
        image_size: int = 128,
        render_every: int = 1,
        max_episode_steps: int = MAX_EPISODE_STEPS,
        terminate_on_success: bool = True,
    ) -> MetaWorldEnv:
        return MetaWorldEnv(
            task,
            camera=camera,
            image_size=image_size,
            render_every=render_every,
            max_episode_steps=max_episode_steps,
            terminate_on_success=terminate_on_success,
        )


def factory() -> MetaWorld:
    """The suite's :class:`rlmesh.EnvFactory` (one catalog variant per task; see :class:`MetaWorld`)."""
    return MetaWorld()


def make_env(task: str, **params: Any) -> MetaWorldEnv:
    """One task's env, built (and validated, and tagged) by :class:`MetaWorld`.

    ``functools.partial(make_env, "push-v3", camera="corner")`` is a picklable recipe:
    what ``rlmesh.run(..., workers=N)`` ships to each worker.
    """
    env: MetaWorldEnv = build_env(MetaWorld, {"task": task, **params})[1]
    return env


def seeds(task: str, episodes: int) -> list[int]:
    """The seed schedule: episode *k* of ``task`` is ``reset(seed=k)``, for every task.

    The env draws an episode's object and goal positions from its seed alone, so these
    are the same episodes in every run, process and worker.
    """
    if episodes < 0:
        raise ValueError(f"episodes must be >= 0, got {episodes}")
    return list(range(episodes))


class Scripted(NumpyModel[Any, Any]):
    """Meta-World's hand-written expert policy for one task, as an rlmesh model.

    ``predict`` takes the env's observation (the suite's Dict, or the flat float64[39]
    vector of ``gymnasium.make("Meta-World/MT1", ...)``) and returns float32[4].
    """

    def __init__(self, task: str) -> None:
        self.task = task
        self._policy: Any = None
        super().__init__(spec=NO_ADAPTER)  # it reads the env's own observation

    def load(self, **kwargs: Any) -> None:
        require_metaworld()
        from metaworld.policies import ENV_POLICY_MAP

        if self.task not in ENV_POLICY_MAP:
            raise ValueError(f"Meta-World has no scripted policy for {self.task!r}")
        policy: Any = ENV_POLICY_MAP[self.task]
        self._policy = policy()
        # the policies warn when a gain saturates the action (the env clips it): noise, not news
        warnings.filterwarnings("ignore", "Constant\\(s\\) may be too high", UserWarning)

    def predict(self, obs: Any) -> np.ndarray[Any, Any]:
        state = obs["state"] if isinstance(obs, dict) else obs
        return np.asarray(self._policy.get_action(np.asarray(state)), dtype=np.float32)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_policy"] = None  # rebuilt in the worker
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.load()

    def __repr__(self) -> str:
        return f"metaworld.scripted({self.task!r})"


def scripted(task: str) -> Scripted:
    """Meta-World's scripted expert for ``task`` as an rlmesh model (see :class:`Scripted`)."""
    return Scripted(task)


#: A picklable zero-argument env recipe per task (what a run ships to workers).
def recipe(task: str, **params: Any) -> functools.partial[MetaWorldEnv]:
    """``functools.partial(make_env, task, **params)``."""
    return functools.partial(make_env, task, **params)
