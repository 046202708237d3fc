"""The fleet's actor: one Ray actor process serving one env endpoint on its node.

:class:`EnvActor` is a plain class; :class:`~rlmesh.ray.EnvFleet` wraps it with
``ray.remote`` when it starts a fleet, so importing this module never imports Ray.
Ray runs ``__init__`` again in a fresh process when it restarts a dead actor: the env
is rebuilt and served on a new port, and :meth:`EnvActor.info` reports the new address.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import numpy as _numpy
from .._spawn.ray import import_ray
from .._spawn.recipe import EnvRecipe, close_quietly, is_gymnasium_id
from ..errors import WorkflowEditionWarning
from ..serve import EnvServer, ServeOptions

__all__ = ["ActorInfo", "EnvActor", "SandboxedEnv"]

#: Info keys a served client adds to every step; a relayed (sandboxed) env drops them so
#: the relaying server adds its own instead of warning that the env shadows them.
_RUNTIME_INFO_KEYS = ("episode_ids", "completed_episodes")


class SandboxedEnv:
    """An env started in a sandbox on the actor's node, as an env factory (``make()``).

    The actor serves the sandbox's client again on the node's address (a relay); the
    relay is closed (and the sandbox stopped) with the env.
    """

    def __init__(self, source: str, lanes: int, sandbox: Mapping[str, Any]) -> None:
        self.source = source
        self.lanes = lanes
        self.sandbox = dict(sandbox)

    def make(self, **kwargs: Any) -> Any:
        return _sandboxed(self.source, self.lanes, kwargs, self.sandbox)


def _sandboxed(source: str, lanes: int, kwargs: dict[str, Any], sandbox: Mapping[str, Any]) -> Any:
    """A sandboxed env client, ready to be served again on this node's address."""
    if lanes == 1:
        return _Relay(_numpy.SandboxEnv(source, **sandbox, **kwargs))
    return _Relay(_numpy.SandboxVectorEnv(source, num_envs=lanes, **sandbox, **kwargs))


class _Relay:
    """A sandbox client served again: the same env, minus the runtime info keys it received."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.observation_space = client.observation_space
        self.action_space = client.action_space
        self.metadata = dict(client.metadata)
        self.render_mode = client.render_mode
        if getattr(client, "num_envs", 1) > 1:
            self.num_envs = client.num_envs
            self.single_observation_space = client.single_observation_space
            self.single_action_space = client.single_action_space

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self._client.reset(**kwargs)
        return obs, _strip(info)

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._client.step(action)
        return obs, reward, terminated, truncated, _strip(info)

    def render(self, **kwargs: Any) -> Any:
        return self._client.render(**kwargs)

    def close(self) -> None:
        self._client.close()


def _strip(info: dict[str, Any]) -> dict[str, Any]:
    for key in _RUNTIME_INFO_KEYS:
        info.pop(key, None)
    return info


@dataclass(frozen=True)
class ActorInfo:
    """Where one fleet actor serves, as it reported itself.

    Attributes:
        index: The actor's position in the fleet (its lanes come in this order).
        address: ``"host:port"`` of its endpoint, ``host`` being the node's IP as Ray reports it.
        num_envs: Lanes the endpoint serves (1 for a scalar env).
        node_id: The Ray node it runs on.
        pid: Its process id on that node.
        incarnation: A fresh id per start: it changes when Ray restarts the actor.
        restarted: Whether this incarnation is a restart.
    """

    index: int
    address: str
    num_envs: int
    node_id: str
    pid: int
    incarnation: str
    restarted: bool


class EnvActor:
    """Builds the env of an :class:`~rlmesh._spawn.EnvRecipe` and serves it on ``<node ip>:0``.

    The server runs on a background thread. A failure to build or serve does not kill
    the actor: :meth:`info` raises it, so the fleet reports the env's own error (a dead
    actor would only say that it died).
    """

    def __init__(self, index: int, recipe: EnvRecipe, options: ServeOptions | None = None) -> None:
        self._server: Any = None
        self._built: Any = None
        self._error: BaseException | None = None
        try:
            self._start(index, recipe, options)
        except Exception as exc:
            self._error = exc

    def _start(self, index: int, recipe: EnvRecipe, options: ServeOptions | None) -> None:
        ray = import_ray("EnvFleet")
        ctx = ray.get_runtime_context()
        built = recipe.build()
        host = str(ray.util.get_node_ip_address())
        bind = f"[{host}]:0" if ":" in host else f"{host}:0"
        try:
            with warnings.catch_warnings():
                if isinstance(recipe.source, SandboxedEnv) or is_gymnasium_id(recipe.source):
                    # not the user's code: nothing to pin there (as `rlmesh serve CartPole-v1`)
                    warnings.simplefilter("ignore", WorkflowEditionWarning)
                self._server = EnvServer(built.env, bind, options=options, tags=built.tags).start()
        except BaseException:
            built.close()
            raise
        self._built = built
        self._info = ActorInfo(
            index=index,
            address=self._server.address.removeprefix("tcp://"),
            num_envs=int(self._server.env_contract.num_envs),
            node_id=str(ctx.get_node_id()),
            pid=os.getpid(),
            incarnation=uuid.uuid4().hex,
            restarted=_reconstructed(ctx),
        )

    def info(self) -> ActorInfo:
        """Where this actor serves (asked again after a restart: the address changes).

        Raises:
            Exception: whatever building or serving the env raised in this incarnation.
        """
        if self._error is not None:
            raise self._error
        return self._info

    def close(self) -> None:
        """Stop serving and close the env (and its factory). Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()  # closes the env
        built, self._built = self._built, None
        if built is not None:
            close_quietly(built.factory)


def _reconstructed(ctx: Any) -> bool:
    with warnings.catch_warnings():  # Ray's property reads a deprecated attribute of its own
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ctx.was_current_actor_reconstructed)
