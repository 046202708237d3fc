"""Gymnasium flavour: remote envs that *are* Gymnasium objects (needs the ``gymnasium`` extra).

:class:`RemoteEnv` is a real :class:`gymnasium.Env` and :class:`RemoteVectorEnv` a
real :class:`gymnasium.vector.VectorEnv`: their spaces are Gymnasium spaces, their
values NumPy arrays, and their ``info`` follows Gymnasium's conventions, so
``check_env``, the standard wrappers, Stable-Baselines3 and CleanRL-style loops
take them as they are. Compared with :mod:`rlmesh.numpy`:

- ``info`` holds only the env's own keys; ``episode_info=True`` adds the runtime
  keys (``episode_ids``, ``completed_episodes``, conformance warnings);
- the vector client's ``observation_space``/``action_space`` are batched (the
  ``single_*`` spaces describe one lane), ``metadata["autoreset_mode"]`` is a
  :class:`gymnasium.vector.AutoresetMode`, and per-lane info values are arrays with
  ``_key`` masks (``final_obs``/``final_info`` under SAME_STEP autoreset);
- ``spec`` is a :class:`gymnasium.envs.registration.EnvSpec` naming the served id.

Importing this module registers ``rlmesh/Remote-v0``::

    >>> import gymnasium as gym, rlmesh.gymnasium  # doctest: +SKIP
    >>> env = gym.make("rlmesh/Remote-v0", address="127.0.0.1:50051")  # doctest: +SKIP

A live connection cannot be pickled: pass the address and connect in the process
that uses the env (``SubprocVecEnv([lambda: RemoteEnv(addr)] * 4)``).
"""

from __future__ import annotations

import gymnasium

from ._env import RemoteEnv
from ._sandbox import SandboxEnv, SandboxVectorEnv
from ._shared import REMOTE_ID
from ._vector import RemoteVectorEnv, _ManyEndpoints

__all__ = ["REMOTE_ID", "RemoteEnv", "RemoteVectorEnv", "SandboxEnv", "SandboxVectorEnv"]

# the classes say where users import them from (their reprs, pickling errors, docs)
for _cls in (RemoteEnv, RemoteVectorEnv, _ManyEndpoints, SandboxEnv, SandboxVectorEnv):
    _cls.__module__ = __name__
del _cls


def _register() -> None:
    if REMOTE_ID not in gymnasium.registry:
        gymnasium.register(
            id=REMOTE_ID,
            entry_point="rlmesh.gymnasium:RemoteEnv",
            vector_entry_point="rlmesh.gymnasium:RemoteVectorEnv",
        )


_register()
