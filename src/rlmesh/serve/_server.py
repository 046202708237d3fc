"""``EnvServer``: serve one env, a vector env, or a list of lanes (SRV-1..46, DELTA-13..22)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from .. import adapters
from .._build import EDITION_BASE, resolve_declared_edition
from .._contract import EnvContract, check_servable
from .._envkit.classify import is_vector_env
from .._keys import ENV_BRANCH_KEY, ENV_TAGS_KEY
from .._spawn.recipe import EnvRecipe
from ..transport import resolve_address
from ..wire import frames, messages as m
from ..wire.meta import normalize
from ..wire.space_query import SpaceQuery
from ._auth import check_exposure
from ._driven import driven_env
from ._driver import Driver, RequestFailed
from ._framework import bridge_env, resolve_framework
from ._lifecycle import ServerBase
from ._loop import ServeLoop
from ._opaque import answer_space_query
from ._options import ServeOptions
from ._sessions.control import SessionSpec
from ._sessions.server import check_session_spec, check_sessions
from ._sessions.supervisor import SessionSupervisor

__all__ = ["MAX_SPACE_DEPTH", "EnvServer"]

#: Deepest nesting of Dict/Tuple spaces an endpoint serves (a leaf at the root is depth 0).
#: Real observation trees nest a handful of levels; the bound keeps every contract well
#: inside the wire's header nesting limit and every space walk far from Python's stack limit.
MAX_SPACE_DEPTH = 32

log = logging.getLogger("rlmesh.serve")

_ENV_TAGS_KEY, _BRANCH_KEY = ENV_TAGS_KEY, ENV_BRANCH_KEY


class _EnvService:
    """Adapts a :class:`Driver` to the serve loop's ``Service`` shape."""

    service = "env"
    component = "rlmesh-env"

    def __init__(self, driver: Driver, contract: EnvContract, declared: str | None) -> None:
        self.driver = driver
        self.env_contract = contract
        self.step = driver.step  # the serve loop's straight road for Step (issue 24)
        self._contract = contract.to_dict()
        self.declared_edition = declared

    def contract(self) -> dict[str, Any]:
        return self._contract

    def begin_session(self) -> None:
        self.driver.begin_session()

    def end_session(self) -> list[m.EpisodeRecord]:
        return self.driver.end_session()

    def handle(self, msg: Any, frame: frames.Frame) -> tuple[Any, list[Any]]:
        """The env requests, one dispatch (the loop answers Ping/Hello/Attach/Configure/Close itself)."""
        if type(msg) is m.Step:  # the hot path first: no table lookup per step
            return self.driver.step(msg, frame.segments)
        if type(msg) is m.Reset:
            return self.driver.reset(msg)
        if type(msg) is m.Render:
            return self.driver.render(msg)
        if type(msg) is SpaceQuery:  # an opaque space's sample/contains (serve/_opaque.py)
            return answer_space_query(self.env_contract, msg)
        raise RequestFailed("UNSUPPORTED", f"an env endpoint does not answer {type(msg).__name__}")


def _is_gymnasium_own(env: Any) -> bool:
    """An env Gymnasium itself ships (``gym.make("CartPole-v1")``, ``gym.make_vec(...)``).

    Serving one is not the user's code, so (as ``rlmesh serve CartPole-v1``) it does not
    warn about an undeclared workflow edition: there is nothing of the user's to pin.
    """
    inner = getattr(env, "unwrapped", env)
    return all(type(e).__module__.startswith("gymnasium.") for e in (env, inner))


class EnvServer(ServerBase):
    """Serve a Gymnasium-shaped environment over TCP or a Unix socket.

    ``env`` may be one env, a vector env (``num_envs`` >= 2; a 1-lane vector env is
    served as a scalar env) or a list of scalar envs served as the lanes of one
    vector endpoint. The listener is bound here, so :attr:`address` is final
    (with the real port when port 0 was asked for) before :meth:`serve` or
    :meth:`start`.

    One client holds the endpoint's session at a time; a second one is refused at
    handshake with ``EndpointBusy`` (``sessions=N`` serves N clients at once). Env calls all run on one thread: the one
    calling :meth:`serve`, or the background thread :meth:`start` creates.

    Args:
        env: The env, vector env, or list of lane envs.
        address: ``"host:port"``, ``"tcp://host:port"``, ``"unix:///path"`` or a bare
            port; ``None`` with no helpers binds ``tcp://127.0.0.1:0``.
        host, port, path, transport: Helpers instead of ``address`` (ADR-3).
        options: :class:`ServeOptions` (timeouts, remote shutdown, edition).
        tags: ``rlmesh.adapters.EnvTags`` validated against the spaces and published
            in the contract metadata.
        framework: How the env wants its actions: ``"numpy"`` (default), ``"torch"``
            or ``"jax"`` (actions arrive as that framework's arrays, fused ``[N, ...]``
            on a vector endpoint; observations may be framework arrays too).
        device: Where torch/jax actions are placed (``"cuda:0"``, a ``torch.device``,
            a ``jax.Device``); only valid with a framework that has devices.
        close_env_on_shutdown: Call ``env.close()`` (every lane) when serving ends.
        sessions: Serve up to this many clients at once, each with its own env instance
            in its own worker process (default 1: one session, served in this process).
            With ``sessions > 1`` (or ``prewarm``), ``env`` is what each session's env is
            built from -- a Gymnasium id, ``"module:attr"``, an ``EnvFactory``, an object
            with ``make()``, an env class or a make callable (one your script defines
            travels to the workers by value); a live env instance cannot be copied and is
            a ``TypeError``. See docs/serving.md, "Many clients on one endpoint".
        prewarm: Keep this many session workers with a built env ready (``<= sessions``),
            so a new client does not wait for ``make()``.

    Example:
        >>> import gymnasium as gym
        >>> server = EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
        >>> server.address.startswith("tcp://127.0.0.1:")
        True
        >>> server.shutdown()
    """

    def __init__(
        self,
        env: Any,
        address: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
        options: ServeOptions | None = None,
        tags: Any = None,
        framework: Any = None,
        device: Any = None,
        close_env_on_shutdown: bool = True,
        sessions: int = 1,
        prewarm: int = 0,
    ) -> None:
        self._kind = "EnvServer"
        self._supervisor: SessionSupervisor | None = None
        self._loop: ServeLoop | None = None
        if options is not None and not isinstance(options, ServeOptions):
            raise TypeError(f"options must be a ServeOptions, got {type(options).__name__}")
        if sessions != 1 or prewarm:  # one env per session, each in its own worker process
            spec = SessionSpec(
                EnvRecipe(env, tags=tags),
                framework=framework,
                device=device,
                options=options or ServeOptions(),
                close_env=close_env_on_shutdown,
            )
            self._serve_sessions(spec, sessions, prewarm, address, host, port, path, transport)
            return
        bridge, dev = _check_framework(framework, device)
        self._options = options or ServeOptions()
        # a bad address (or one other hosts reach, without a token) is refused before the env is looked at
        addr = resolve_address(
            address, host=host, port=port, path=path, transport=transport, bind=True
        )
        check_exposure(addr, self._options, who="EnvServer")
        service, driven = _env_service(env, self._options, tags, bridge, dev)
        self._contract = service.env_contract
        listener, unix_path = self._bind(address, host, port, path, transport)
        self._loop = ServeLoop(listener, service, self._options)
        self._init_lifecycle(self._loop, driven.close, close_env_on_shutdown, unix_path)

    @classmethod
    def for_sessions(
        cls, spec: SessionSpec, address: str | None, *, sessions: int, prewarm: int = 0
    ) -> EnvServer:
        """An endpoint of ``sessions`` sessions whose envs each worker builds from ``spec``.

        What ``serve_env(..., sessions=N)``, ``rlmesh serve --sessions N`` and a sandbox's
        bootstrap use: ``spec`` carries the make binding, lanes and framework as well.
        """
        self = object.__new__(cls)
        self._kind = "EnvServer"
        self._supervisor = None
        self._loop = None
        self._serve_sessions(spec, sessions, prewarm, address, None, None, None, None)
        return self

    def _serve_sessions(
        self,
        spec: SessionSpec,
        sessions: int,
        prewarm: int,
        address: str | None,
        host: str | None,
        port: int | None,
        path: str | None,
        transport: str | None,
    ) -> None:
        check_sessions(sessions, prewarm)
        spec = check_session_spec(spec, sessions)
        self._options = spec.options
        listener, unix_path = self._bind(address, host, port, path, transport)
        self._supervisor = SessionSupervisor(listener, spec, sessions, prewarm)
        self._init_lifecycle(self._supervisor, lambda: None, False, unix_path)

    # -- read-only surface ----------------------------------------------------------------

    @property
    def sessions(self) -> int:
        """The most sessions this endpoint serves at once (``sessions=``; 1 by default)."""
        return 1 if self._supervisor is None else self._supervisor.sessions

    @property
    def sessions_in_use(self) -> int:
        """Sessions being served now (clients past their handshake, or waiting for their env).

        With ``sessions > 1`` a session counts until its worker's process has exited (its
        env closed): its slot is not free before.
        """
        if self._supervisor is not None:
            return self._supervisor.in_use
        return int(self._loop is not None and self._loop._active is not None)

    @property
    def env_contract(self) -> EnvContract:
        """The contract clients receive at handshake.

        With ``sessions > 1`` it is known once a session worker has built its env.

        Raises:
            RuntimeError: a multi-session endpoint whose workers built no env yet (use
                ``prewarm=``, or connect first).
        """
        if self._supervisor is None:
            return self._contract
        if self._supervisor.contract is None:
            raise RuntimeError(
                "the contract of a multi-session endpoint is known once a session worker has built its env; "
                "connect a client first, or serve with prewarm >= 1"
            )
        return EnvContract.from_dict(self._supervisor.contract)

    @property
    def spec(self) -> EnvContract:
        """Alias of :attr:`env_contract` (DEC-9)."""
        return self.env_contract


def _env_service(
    env: Any, options: ServeOptions, tags: Any, bridge: Any, dev: Any
) -> tuple[_EnvService, Any]:
    """Check and wrap an env (or lanes) for the serve loop: ``(service, driven env)``.

    Shared by :class:`EnvServer` and a multi-session endpoint's session workers.
    """
    envs = list(env) if isinstance(env, (list, tuple)) else [env]
    for e in envs:
        _check_space_depth(e)
        _stamp_tags(e, tags)
        _check_branch(e)
    driven = driven_env(env)
    if bridge is not None:  # SRV-30: the env takes and returns its framework's arrays
        bridge_env(driven, bridge, dev)
    declared = resolve_declared_edition(
        served=options.workflow_edition,
        warn=not all(_is_gymnasium_own(e) for e in envs),
        who="this EnvServer",
        hint=f'EnvServer(..., options=rlmesh.ServeOptions(workflow_edition="{EDITION_BASE}"))',
    )
    metadata = _contract_metadata(driven.metadata)
    contract = EnvContract(
        driven.env_id,
        driven.obs_space,
        driven.act_space,
        render_mode=driven.render_mode,
        num_envs=driven.num_envs,
        metadata=metadata,
        autoreset_mode=driven.autoreset if driven.lanes is not None else "Disabled",
    )
    service = _EnvService(Driver(driven), contract, declared)
    check_servable(contract, service.contract())  # what its clients would refuse, refused here
    return service, driven


def _space_depth(space: Any) -> int:
    """How many Dict/Tuple levels a (Gymnasium or rlmesh) space nests, measured without recursion."""
    depth = 0
    level = [space]
    while level and depth <= MAX_SPACE_DEPTH:
        nxt: list[Any] = []
        for sp in level:
            children = getattr(sp, "spaces", None)
            if isinstance(children, Mapping):
                nxt.extend(children.values())
            elif isinstance(children, (tuple, list)):
                nxt.extend(children)
        if not nxt:
            break
        depth += 1
        level = nxt
    return depth


def _check_space_depth(env: Any) -> None:
    """Issue 18 defect 10: a space nested deeper than :data:`MAX_SPACE_DEPTH` is refused clearly."""
    for name in (
        "single_observation_space",
        "observation_space",
        "single_action_space",
        "action_space",
    ):
        try:
            space = getattr(env, name, None)
        except Exception:
            continue
        if space is not None and _space_depth(space) > MAX_SPACE_DEPTH:
            raise ValueError(
                f"the env's {name} nests Dict/Tuple spaces more than {MAX_SPACE_DEPTH} levels deep; "
                f"rlmesh serves spaces nested at most {MAX_SPACE_DEPTH} levels (MAX_SPACE_DEPTH): "
                "flatten the space (e.g. join nested keys with '/')"
            )


def _check_framework(framework: Any, device: Any) -> tuple[Any, Any]:
    """SRV-30/32: ``(bridge, device)`` for torch/jax, ``(None, None)`` for numpy (the default)."""
    return resolve_framework(framework, device)


def _stamp_tags(env: Any, tags: Any) -> None:
    """SRV-20/21: validate tags against the spaces and merge them into ``env.metadata``."""
    md = getattr(env, "metadata", None)
    if tags is None and not (isinstance(md, Mapping) and _ENV_TAGS_KEY in md):
        return
    if tags is None:
        tags = adapters.EnvTags.from_metadata(md)
    # SRV-20: a vector env's batched spaces are not what tags describe; its per-lane
    # check happens when a model resolves against the published per-lane contract.
    adapters.tag(env, tags, validate=not is_vector_env(env))


def _check_branch(env: Any) -> None:
    """DELTA-21: ``RLMESH_EXPECTED_ENV_BRANCH`` must equal the env's published branch."""
    raw = os.environ.get("RLMESH_EXPECTED_ENV_BRANCH")
    if raw is None:
        return
    try:
        expected = json.loads(raw)
    except ValueError:
        raise ValueError(f"RLMESH_EXPECTED_ENV_BRANCH must be a JSON object, got {raw!r}") from None
    md = getattr(env, "metadata", None)
    actual = md.get(_BRANCH_KEY) if isinstance(md, Mapping) else None
    if actual != expected:
        raise ValueError(
            f"env branch mismatch: RLMESH_EXPECTED_ENV_BRANCH={expected!r} but the env publishes {actual!r}"
        )


def _contract_metadata(metadata: Any) -> dict[str, Any] | None:
    """SRV-13: the env metadata through the metadata codec (TypeError if it cannot travel)."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        return None
    md = {k: v for k, v in metadata.items()}
    mode = md.get("autoreset_mode")
    if mode is not None and hasattr(mode, "value"):
        md["autoreset_mode"] = mode.value
    out: dict[str, Any] = normalize(md)
    return out
