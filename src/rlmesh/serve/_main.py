"""``rlmesh.serve.serve_env`` and ``rlmesh.serve.main`` (``python -m rlmesh.serve``).

Two grammars serve things from a command line, and they differ on purpose:

- ``python -m rlmesh.serve`` (this module's :func:`main`) follows the reference
  (MOD-33, AUTH-25, CLI-4, DELTA-23): a **positional target is a model**, an env
  is given with ``--env TARGET``. ``--framework``/``--device`` only make sense
  for an env: with a model target they are a usage error (exit 2), decided from
  the arguments alone, before the target is imported.
- ``rlmesh serve`` (the console command, :mod:`rlmesh._cli.serve`) keeps the
  friendlier grammar: a positional target is an env (a Gymnasium id or
  ``module:attr``), with ``--num-envs``/``--param``/``--ready-file`` and more.

:func:`serve_env` is the blocking library call behind ``--env`` and
``EnvFactory.serve`` (seed 000, CNF2-A8).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._build import resolve_declared_edition
from .._spawn.recipe import EnvRecipe, is_env_factory
from ..authoring._factory import framework_name
from ._options import ServeOptions
from ._server import EnvServer
from ._sessions.control import SessionSpec

__all__ = ["main", "run_serve_env", "serve_env"]

#: Binding keys that are serving options, never make/load parameters (CLI-4, DELTA-23).
RESERVED_BINDING_KEYS = (
    "num_envs",
    "vectorization_mode",
    "framework",
    "device",
    "workflow_edition",
    "autoreset",
)
_DEVICE_FRAMEWORKS = ("torch", "jax")


def serve_env(
    env_source: Any,
    address: str,
    /,
    *,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    framework: str | None = None,
    device: object | None = None,
    workflow_edition: str | None = None,
    autoreset: str | None = None,
    sessions: int = 1,
    prewarm: int = 0,
    **make_kwargs: Any,
) -> None:
    """Host an env on ``address`` (blocking) until the server is stopped.

    ``env_source`` and ``address`` are positional-only, so a make parameter
    named ``address`` or ``env_source`` passes through to ``make`` like any
    other keyword. The named keywords are serving options and never reach
    ``make`` (CLI-5).

    Args:
        env_source: An :class:`rlmesh.EnvFactory` (class or instance:
            ``prepare()`` + validated ``make(**make_kwargs)``, tags published),
            a make callable or env class (called with ``make_kwargs``), a live
            env (no kwargs), or a string: a Gymnasium id or ``module:attr``.
        address: ``"host:port"``, ``"tcp://host:port"`` or ``"unix:///path"``.
        num_envs: Lanes to serve. With ``vectorization_mode=None`` the source is
            built ``num_envs`` times and served as independent lanes.
        vectorization_mode: ``"sync"``/``"async"``: one Gymnasium vector env
            instead (served untagged).
        framework: ``"numpy"`` (default), ``"torch"`` or ``"jax"``: the type the
            env receives actions as. A factory's pinned framework is the default.
        device: Device for torch/jax actions; ignored for numpy.
        workflow_edition: The edition to declare (DELTA-7 rung 3).
        autoreset: How lanes restart when ``num_envs > 1``: ``"next-step"``
            (``None``, the default, like ``gymnasium.make_vec``), ``"same-step"`` or
            ``"disabled"``. With a vectorization mode, ``None`` keeps the vector env's own.
        **make_kwargs: The make binding.

    Raises:
        ParamError: a factory binding that does not validate (nothing built).
        ValueError: bad ``num_envs``/``vectorization_mode``, or a reserved key.
        NotImplementedError: torch/jax through a Gymnasium vector fan-out.
    """
    run_serve_env(
        env_source,
        address,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        framework=framework,
        device=device,
        workflow_edition=workflow_edition,
        autoreset=autoreset,
        make_kwargs=make_kwargs,
        announce=lambda addr: print(f"RLMesh serving env on {addr}", flush=True),
        sessions=sessions,
        prewarm=prewarm,
    )


def run_serve_env(
    env_source: Any,
    address: str,
    *,
    num_envs: int,
    vectorization_mode: str | None,
    framework: str | None,
    device: object | None,
    workflow_edition: str | None,
    make_kwargs: Mapping[str, Any],
    autoreset: str | None = None,
    announce: Callable[[str], None],
    built: Callable[[], None] = lambda: None,
    sessions: int = 1,
    prewarm: int = 0,
    options: ServeOptions | None = None,
) -> None:
    """:func:`serve_env`'s body, with the announcement and the "env built" mark as callables
    (``python -m rlmesh.serve --env`` prints its own line); ``options`` carries the token,
    TLS and metrics settings (its edition is replaced by the one resolved here)."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(
            f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}"
        )
    cls: Any = None
    if is_env_factory(env_source):
        cls = env_source if isinstance(env_source, type) else type(env_source)
    pinned = cls._bridge if cls is not None else None
    fw = framework if framework is not None else framework_name(pinned)
    if vectorization_mode is not None and fw in _DEVICE_FRAMEWORKS:
        raise NotImplementedError(
            f"framework={fw!r} cannot be served through a Gymnasium vector env "
            f"(vectorization_mode={vectorization_mode!r}); drop vectorization_mode to serve "
            f"{num_envs} lanes instead"
        )
    declared = (
        resolve_declared_edition(served=workflow_edition, class_attr=cls.workflow_edition)
        if cls is not None
        else workflow_edition  # EnvServer resolves the lower rungs itself (DELTA-22)
    )
    recipe = EnvRecipe(
        env_source,
        dict(make_kwargs),
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        autoreset=autoreset,
    )
    framework_arg = framework if framework is not None else pinned
    device_arg = device if fw in _DEVICE_FRAMEWORKS else None
    options = (options or ServeOptions()).replace(workflow_edition=declared)
    if sessions != 1 or prewarm:  # one env per session, each in its own worker process
        spec = SessionSpec(recipe, framework=framework_arg, device=device_arg, options=options)
        server = EnvServer.for_sessions(spec, address, sessions=sessions, prewarm=prewarm)
        announce(server.address)
        server.serve()
        return
    made = recipe.build()
    built()
    try:
        server = EnvServer(
            made.env,
            address,
            options=options,
            tags=made.tags,
            framework=framework_arg,
            device=device_arg,
        )
    except BaseException:
        made.close()
        raise
    announce(server.address)
    try:
        server.serve()
    finally:
        if made.factory is not None and callable(getattr(made.factory, "close", None)):
            made.factory.close()  # AUTH-4/O-9: the factory's close runs on teardown


# -- python -m rlmesh.serve ------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlmesh.serve``: serve a model (positional) or an env (``--env``) (CNF2-B8).

    Returns the exit code: 0 after a normal stop, 1 on an error (one ``Error:``
    line on stderr), 130 on Ctrl-C. Invalid arguments -- no target or two,
    ``--framework``/``--device`` with a model, ``--kwargs-json`` that is not a
    JSON object, a reserved binding key, a bad ``RLMESH_NUM_ENVS`` -- are usage
    errors: ``SystemExit`` with status 2.

    The parser lives with the other command lines, in :mod:`rlmesh._cli.serve_module`.
    """
    from .._cli.serve_module import (
        main as serve_module_main,  # porch: the command lines sit above serve/
    )

    return serve_module_main(argv)
