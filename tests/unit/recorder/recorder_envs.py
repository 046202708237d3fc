"""Deterministic camera envs for the recorder tests: frames are a pure function of the step.

``frame(t, h, w, salt)`` is smooth (so a lossy codec's PSNR is meaningful) and changes
every step (a moving bright square), so a decoded video can be matched to its source.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

import rlmesh.adapters as adapt

__all__ = ["CamEnv", "frame", "psnr", "tagged"]


def frame(t: int, h: int = 48, w: int = 64, salt: int = 0) -> np.ndarray:
    """The frame of step ``t``: gradients plus a 10x10 square that moves with ``t``."""
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    img = np.empty((h, w, 3), np.float32)
    img[..., 0] = 40 + 150 * x / max(1, w - 1)
    img[..., 1] = 40 + 150 * y / max(1, h - 1)
    img[..., 2] = 60 + 20 * salt + 3 * (t % 20)
    cx = (4 * t) % max(1, w - 10)
    img[h // 3 : h // 3 + 10, cx : cx + 10, :] = 235
    return img.astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


class CamEnv:
    """Episodes of ``length`` steps with an rgb ``render()`` and optional image observations.

    Args:
        length: Steps per episode (terminated at the end, success per ``success``).
        size: ``(h, w)`` of every frame.
        render: Whether ``render_mode`` is ``"rgb_array"``.
        images: Observation keys holding frames (``frame(t, salt=i)`` for key ``i``).
        success: The ``is_success`` reported at the last step (``None``: not reported);
            a callable ``(episode) -> bool`` varies it per episode.
        render_fails_at: Steps (env ``t`` after the step) at which ``render()`` raises.
        resize_at: From this step on, ``render()`` returns a frame of another size.
        info: Extra info per step (a callable ``(t) -> dict``).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        length: int = 5,
        *,
        size: tuple[int, int] = (48, 64),
        render: bool = True,
        images: tuple[str, ...] = (),
        success: Any = True,
        render_fails_at: tuple[int, ...] = (),
        resize_at: int | None = None,
        info: Any = None,
    ) -> None:
        self.length = length
        self.h, self.w = size
        self.render_mode = "rgb_array" if render else None
        self.images = images
        self.success = success
        self.render_fails_at = set(render_fails_at)
        self.resize_at = resize_at
        self.info_fn = info
        obs: dict[str, Any] = {"pos": spaces.Box(-1.0, 1.0, (3,), np.float32)}
        for key in images:
            obs[key] = spaces.Box(0, 255, (self.h, self.w, 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t = 0
        self.episode = -1
        self.renders = 0

    def _obs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pos": np.zeros(3, np.float32)}
        for i, key in enumerate(self.images):
            out[key] = frame(self.t, self.h, self.w, salt=i + 1)
        return out

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        self.episode += 1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        end = self.t >= self.length
        info: dict[str, Any] = dict(self.info_fn(self.t) if self.info_fn else {})
        if end:
            ok = self.success(self.episode) if callable(self.success) else self.success
            if ok is not None:
                info["is_success"] = ok
        return self._obs(), 0.5 * self.t, end, False, info

    def render(self) -> np.ndarray:
        self.renders += 1
        if self.t in self.render_fails_at:
            raise RuntimeError(f"render glitch at step {self.t}")
        if self.resize_at is not None and self.t >= self.resize_at:
            return frame(self.t, self.h + 8, self.w, salt=0)
        return frame(self.t, self.h, self.w, salt=0)


def tagged(env: CamEnv, roles: dict[str, str]) -> Any:
    """``env`` with image roles declared for its observation keys (``{key: role}``)."""
    observation: dict[str, Any] = {key: adapt.ImageTag(role) for key, role in roles.items()}
    observation["pos"] = adapt.StateTag(adapt.EEF_POS)
    tags = adapt.EnvTags(
        observation=observation, action=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, dim=1))
    )
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # custom (unregistered) image roles are the point of some tests
        return adapt.tag(env, tags)
