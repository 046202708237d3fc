"""The env side of the drive: one opened env that resets and steps with canonical, checked results.

A session opens its env target once (:func:`rlmesh.eval._targets.open_target`) and
wraps it here once. Everything the drive loops call comes back normalised (the
shapes of ``rlmesh._envkit.results``), canonical and already checked:

- a **local** env is wrapped in the shared checks (``rlmesh._envkit.checks.Checks``, the
  shape of Gymnasium's ``PassiveEnvChecker``): actions, observations and info are
  checked as a server's driver checks them, under the same
  ``RLMESH_VALIDATION_POLICY`` (SRV-60, CNF-4), resolved once per session;
- a **remote** env is the numpy client, whose values are canonical already
  (``canonical = True``): a local route does not canonicalise them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._envkit.checks import Checks, env_failure, local_checks, local_scalar_step
from .._envkit.results import normalize_reset, read_vector_step
from ._targets import EnvConn

__all__ = ["EnvSide"]


class EnvSide:
    """One opened env as the drive sees it (local and checked, or remote and canonical).

    Attributes:
        contract: The env's contract (metadata, spaces, ``num_envs``, autoreset mode).
        num_envs: Lanes (1 for a single env).
        is_vector: Whether the env speaks the batched vector API.
        remote: Whether the env is a client of a served env.
        canonical: Whether observations arrive as canonical trees already (a remote env).
        autoreset: The vector env's autoreset mode (``"NextStep"``, ``"SameStep"``, ``"Disabled"``).
        per_lane_reset: How the driver resets single lanes: ``"mask"`` (Gymnasium
            ``reset_mask``), ``"indices"`` (a lanes endpoint), or ``""`` (the env autoresets).
        autoreset_indices: A remote autoresetting endpoint that may reset single lanes.
        step: ``step(action) -> (obs, reward, terminated, truncated, info)`` of a single env.
    """

    def __init__(self, conn: EnvConn) -> None:
        self.conn = conn
        self._env = env = conn.env
        self.contract = contract = conn.contract
        self.num_envs = conn.num_envs
        self.is_vector = conn.is_vector
        self.remote = conn.remote
        self.canonical = conn.remote
        self.autoreset = conn.autoreset_mode
        self.per_lane_reset = conn.per_lane_reset
        self.autoreset_indices = conn.autoreset_indices
        self.metadata: Mapping[str, Any] | None = conn.metadata
        self.checks: Checks | None = None
        if not conn.remote:  # CNF-4: the policy is resolved once per session
            self.checks = local_checks(
                contract.observation_space,
                contract.action_space,
                conn.num_envs if conn.is_vector else None,
            )
        self.step: Any = (
            env.step if conn.remote or conn.is_vector else local_scalar_step(env.step, self.checks)
        )

    @property
    def lanes(self) -> int:
        """Lanes the route binds to (``num_envs`` for a vector env, else 1)."""
        return self.num_envs if self.is_vector else 1

    @property
    def flavour(self) -> str:
        """The values the env side returns: ``"numpy"`` (a remote env: the numpy client's
        canonical trees) or ``"env"`` (a local env's own values, checked)."""
        return "numpy" if self.remote else "env"

    @property
    def action_space(self) -> Any:
        return self.conn.action_space

    @property
    def single_action_space(self) -> Any:
        return self.conn.single_action_space

    @property
    def render_target(self) -> Any:
        """The object whose ``render()`` shows the env (the viewer's and recorder's render camera)."""
        return self._env

    @property
    def workflow_edition(self) -> str:
        """The workflow edition a remote env negotiated."""
        return str(self._env.selected_workflow_edition)

    # -- a single env ------------------------------------------------------------------------

    def reset(
        self, seed: int | None, options: Mapping[str, Any] | None
    ) -> tuple[Any, Mapping[str, Any]]:
        """Reset a single env; the observation and info are read (and checked) as a server reads them."""
        env = self._env
        if options is not None:
            ret = env.reset(seed=seed, options=options)
        elif seed is not None:
            ret = env.reset(seed=seed)
        else:
            ret = env.reset()
        return self._read_reset(ret)

    # -- a vector env ------------------------------------------------------------------------

    def reset_all(self, seeds: Sequence[int | None]) -> Any:
        """The first full reset of every lane; the batched observation."""
        env = self._env
        ret = env.reset(seed=list(seeds)) if any(s is not None for s in seeds) else env.reset()
        return self._read_reset(ret)[0]  # a run does not surface a vector env's reset info

    def reset_lanes(self, how: str, which: Sequence[int], seeds: Sequence[int | None]) -> Any:
        """Reset only ``which`` lanes (``seeds`` has one entry per lane); the full batched observation.

        ``how`` is ``"mask"`` (Gymnasium ``options={"reset_mask": ...}``) or
        ``"indices"`` (a client's ``env_indices``). An endpoint that cannot reset single
        lanes raises :class:`rlmesh.errors.Unsupported`.
        """
        env = self._env
        if how == "mask":
            n = self.num_envs
            mask = np.zeros(n, dtype=np.bool_)
            mask[list(which)] = True
            ret = env.reset(
                seed=[seeds[i] if mask[i] else None for i in range(n)], options={"reset_mask": mask}
            )
        else:
            chosen = [seeds[i] for i in which]
            ret = env.reset(
                seed=chosen if any(s is not None for s in chosen) else None, env_indices=list(which)
            )
        return self._read_reset(ret)[0]

    def _read_reset(self, ret: Any) -> tuple[Any, dict[str, Any]]:
        """A reset's result read (and checked) as a server reads it (SRV-60, INFO-4).

        Warnings raised by the checks ride in the reset's info, as in a served reset reply.
        """
        obs, info = normalize_reset(ret)
        checks = self.checks
        if checks is not None:
            obs = checks.observation(obs, "reset")
            info = checks.local_info(info, "reset")
        return obs, info

    def step_lanes(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every lane: ``(obs, reward, terminated, truncated, info)`` with a lane axis, checked."""
        checks = self.checks
        if checks is not None:
            checks.action(action)  # the env gets the batch as the model gave it once it passes
        result = self._env.step(action)
        try:
            obs, rew, term, trunc, info = read_vector_step(result, self.num_envs)
        except Exception as exc:  # as the server's driver words a result it cannot read
            raise env_failure("step", exc) from None
        if checks is not None:
            obs = checks.observation(obs, "step")
            info = checks.local_info(info, "step")
        return obs, rew, term, trunc, info

    def close(self, *, close_env: bool) -> None:
        """Release what the session owns of the env (see :meth:`EnvConn.close`)."""
        self.conn.close(close_env=close_env)
