"""Third-party Gymnasium ids served as they are: find and import the package that registers one.

``gymnasium.make("Meta-World/MT1")`` fails with ``NamespaceNotFound`` in a process that never
imported ``metaworld``: Gymnasium 1.x no longer loads plugins by itself. Every place rlmesh
builds an env from a Gymnasium id (``rlmesh serve``, ``serve_env``, ``python -m
rlmesh.serve``, the sandbox bootstrap, session workers, distributed-eval workers, Ray
actors, ``rlmesh eval``) goes through :func:`make_gym_env`, which first calls
:func:`ensure_registered`. That tries, in order, until the id is registered:

1. Gymnasium's own ``"module:EnvId"`` spelling: import ``module`` (e.g.
   ``"metaworld:Meta-World/MT1"``); the id is then ``EnvId``;
2. the id as it is (already registered: Gymnasium's own envs, or a package imported
   earlier, e.g. with ``rlmesh serve --import MODULE``);
3. the entry points a package declares for Gymnasium plugins (groups ``gymnasium.envs``
   and ``gymnasium.env_plugins``): the one named after the id's namespace first, then
   the rest;
4. for a namespaced id, the module named after its namespace (``Meta-World`` ->
   ``metaworld``, ``MyNS`` -> ``myns`` / ``my_ns``), and the few well-known ones in
   :data:`KNOWN_NAMESPACES`.

When nothing registers it, :class:`~rlmesh.errors.UnknownEnvId` names both remedies
(``--import MODULE`` and ``"module:EnvId"``). The module sits with the foundations: it
imports only :mod:`rlmesh.errors` (Gymnasium lazily).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from typing import Any

from .errors import DependencyMissing, UnknownEnvId

__all__ = ["KNOWN_NAMESPACES", "PLUGIN_GROUPS", "ensure_registered", "make_gym_env"]

#: Entry-point groups whose entries register envs when loaded (called, if callable).
PLUGIN_GROUPS = ("gymnasium.envs", "gymnasium.env_plugins")

#: Namespaces whose registering module is not the namespace's own name.
KNOWN_NAMESPACES: dict[str, tuple[str, ...]] = {
    "Meta-World": ("metaworld",),
    "ALE": ("ale_py",),
    "MiniGrid": ("minigrid",),
    "BabyAI": ("minigrid",),
    "MyoSuite": ("myosuite",),
    "Robotics": ("gymnasium_robotics",),
}

_NS = re.compile(r"^(?P<ns>[\w:.\-]+)/")


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError:
        raise DependencyMissing(
            'serving a Gymnasium id needs gymnasium; pip install gymnasium (the "gymnasium" '
            "extra of rlmesh-py)",
            name="gymnasium",
        ) from None
    return gymnasium


def _registered(gym: Any, env_id: str) -> bool:
    if env_id in gym.registry:
        return True
    try:  # an id without its version ("CartPole") resolves to the highest one
        ns, name, version = gym.envs.registration.parse_env_id(env_id)
    except Exception:
        return False
    if version is not None:
        return False
    return gym.envs.registration.find_highest_version(ns, name) is not None


def _namespace(env_id: str) -> str | None:
    m = _NS.match(env_id)
    return m.group("ns") if m else None


def _module_candidates(ns: str) -> Iterator[str]:
    """Module names a namespace may be registered by (``Meta-World`` -> ``metaworld``)."""
    seen: set[str] = set()
    lower = ns.lower()
    for name in (
        *KNOWN_NAMESPACES.get(ns, ()),
        lower,
        lower.replace("-", "").replace("_", ""),
        lower.replace("-", "_"),
        re.sub(r"(?<!^)(?=[A-Z])", "_", ns).lower().replace("-", "_"),
    ):
        if name.isidentifier() and name not in seen:
            seen.add(name)
            yield name


def _entry_points(ns: str | None) -> list[Any]:
    """Plugin entry points, the one named after ``ns`` first."""
    from importlib.metadata import entry_points

    found = [ep for group in PLUGIN_GROUPS for ep in entry_points(group=group)]
    return sorted(found, key=lambda ep: ep.name != ns)


def _load_plugin(ep: Any) -> None:
    try:
        obj = ep.load()
        if callable(obj):
            obj()
    except Exception:
        pass  # a broken plugin must not stop the others; the final error names the id


def _import_quietly(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.split(".")[0] == exc.name.split(".")[0]:
            return False  # no such module: the next candidate
        raise  # the module exists but a dependency of it is missing: say so
    return True


def ensure_registered(env_id: str) -> str:
    """Make ``env_id`` resolvable by ``gymnasium.make``; return the id to pass it.

    ``"module:EnvId"`` imports ``module`` and returns ``"EnvId"``; any other id is
    returned unchanged once registered (see the module docstring for where it looks).

    >>> ensure_registered("CartPole-v1")
    'CartPole-v1'
    >>> ensure_registered("gymnasium.envs.classic_control:MountainCar-v0")
    'MountainCar-v0'

    Raises:
        UnknownEnvId: nothing registers it (a ``LookupError``); the message names the
            ``--import MODULE`` option and the ``"module:EnvId"`` spelling.
        ModuleNotFoundError: the ``module`` of ``"module:EnvId"`` does not exist, or a
            registering package is installed but one of its own dependencies is not.
        DependencyMissing: gymnasium is not installed.
    """
    gym = _gymnasium()
    module, sep, rest = env_id.partition(":")
    if sep and module and rest and "/" not in module:
        importlib.import_module(module)
        if not _registered(gym, rest):
            raise UnknownEnvId(
                f"importing {module!r} did not register the Gymnasium id {rest!r}; check the id "
                f"(registered ids under that name: {_near(gym, rest)})",
                env_id=env_id,
            )
        return rest
    if _registered(gym, env_id):
        return env_id
    ns = _namespace(env_id)
    for ep in _entry_points(ns):
        _load_plugin(ep)
        if _registered(gym, env_id):
            return env_id
    tried: list[str] = []
    if ns is not None:
        for name in _module_candidates(ns):
            tried.append(name)
            if _import_quietly(name) and _registered(gym, env_id):
                return env_id
    looked = f"; looked for module(s) {', '.join(tried)}" if tried else ""
    raise UnknownEnvId(
        f"no installed package registers the Gymnasium id {env_id!r}{looked}. Import the "
        f"package that registers it first: `rlmesh serve {env_id} --import MODULE` (or "
        f"imports=[...] / SandboxBuild(imports=[...])), or use Gymnasium's spelling "
        f"'MODULE:{env_id}' (e.g. 'metaworld:Meta-World/MT1')",
        env_id=env_id,
    )


def _near(gym: Any, name: str) -> str:
    base = name.split("/")[-1].split("-v")[0].lower()
    near = sorted(i for i in gym.registry if base and base in i.lower())[:5]
    return ", ".join(near) or "none"


def make_gym_env(env_id: Any, **kwargs: Any) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` after :func:`ensure_registered` (the one call site).

    ``env_id`` is an id string or a ``gymnasium.envs.registration.EnvSpec`` (an env's
    ``.spec``, which names its entry point itself and needs no registration).

    >>> make_gym_env("CartPole-v1").spec.id
    'CartPole-v1'
    """
    gym = _gymnasium()
    if not isinstance(env_id, str):
        return gym.make(env_id, **kwargs)
    return gym.make(ensure_registered(env_id), **kwargs)
