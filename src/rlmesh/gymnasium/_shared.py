"""One connection per endpoint in this process, shared by its Gymnasium handles; the hints and spec."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from rlmesh import _keys, numpy as _rnp
from rlmesh._autoreset import Autoreset
from rlmesh.errors import AuthenticationFailed, EndpointBusy
from rlmesh.transport import resolve_address

log = logging.getLogger("rlmesh.gymnasium")

#: The id registered with Gymnasium on import: ``gymnasium.make(REMOTE_ID, address=...)``.
REMOTE_ID = "rlmesh/Remote-v0"
_WARNING_KEY = _keys.CONFORMANCE_WARNING_KEY
_MODES = {
    Autoreset.NEXT_STEP.value: AutoresetMode.NEXT_STEP,
    Autoreset.SAME_STEP.value: AutoresetMode.SAME_STEP,
    Autoreset.DISABLED.value: AutoresetMode.DISABLED,
}


class _Handle:
    """What both Gymnasium handles on one endpoint share: their address, no pickling, and
    ``close()`` when collected (a sandbox's handle stops its sandbox)."""

    _client: Any

    @property
    def address(self) -> str:
        """The endpoint address this env is connected to."""
        return str(self._client.address)

    def __del__(self) -> None:
        _close_quietly(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        cls = type(self)
        raise TypeError(
            f"cannot pickle a {cls.__module__}.{cls.__name__}: a live connection cannot be pickled; "
            f"pass the address and reconnect in the other process (for example an env factory "
            f"`lambda: rlmesh.gymnasium.RemoteEnv(address)` for SubprocVecEnv)"
        )


def _close_quietly(handle: Any) -> None:
    """Its own ``close()`` (gymnasium.Env's, VectorEnv's or a sandbox's), errors swallowed."""
    try:
        handle.close()
    except Exception:
        pass


class _ScalarClient(_rnp.RemoteEnv):
    """The NumPy client; the runtime info keys go to ``runtime``, never into ``info``."""

    _runtime_aside = True


class _VectorClient(_rnp.RemoteVectorEnv):
    _runtime_aside = True
    _plain_info = False  # Gymnasium's own vector-info layout keeps arrays (and their dtypes)


class _Shared:
    """One connection and the Gymnasium objects of this process using it."""

    def __init__(self, client: Any, key: tuple[type, str]) -> None:
        self.client = client
        self.key = key
        self.refs = 1
        self.owner: Any = None  # the handle whose reset started the served episode (issue 29)

    def release(self) -> None:
        self.refs -= 1
        if self.refs <= 0:
            if _LIVE.get(self.key) is self:
                del _LIVE[self.key]
            self.client.close()


_LIVE: dict[tuple[type, str], _Shared] = {}


def _connect(cls: type, address: str | None, kwargs: dict[str, Any]) -> _Shared:
    """Dial the endpoint; if it is busy with this very process's connection, share that one.

    An endpoint serves one session at a time, so ``env.spec.make()`` (which
    ``check_env`` and some tools call while ``env`` is open) gets a second
    handle on the same served env rather than a refusal.
    """
    try:
        client = cls(address, **kwargs)
    except (EndpointBusy, AuthenticationFailed):
        # ``env.spec.make()`` dials again without the token (a spec never holds one): this
        # process's own live connection to the endpoint is shared, as for a busy one
        url = resolve_address(
            address,
            host=kwargs.get("host"),
            port=kwargs.get("port"),
            path=kwargs.get("path"),
            transport=kwargs.get("transport"),
            bind=False,
        ).url
        shared = _LIVE.get((cls, url))
        exc = sys.exc_info()[1]
        if isinstance(exc, AuthenticationFailed) and (
            shared is None or shared.client.closed or kwargs.get("token") is not None
        ):
            raise  # a token given and refused is the caller's error, live connection or not
        if shared is None or shared.client.closed:
            raise EndpointBusy(f"{exc}. {_ONE_SESSION_HINT}") from None
        log.info("the endpoint at %s is busy with this process's own connection; sharing it", url)
        shared.refs += 1
        return shared
    client.runtime = {}
    key = (cls, client.address)
    shared = _Shared(client, key)
    _LIVE.setdefault(key, shared)
    return shared


_ONE_SESSION_HINT = (
    "Each Gymnasium handle needs a session of its own: serve the env with several sessions "
    "(rlmesh serve ENV --sessions N, EnvServer(target, sessions=N)), or serve N lanes (--num-envs N) "
    "and use gymnasium.make_vec(..., vectorization_mode='vector_entry_point') / "
    "rlmesh.gymnasium.RemoteVectorEnv, or give each handle its own endpoint (RemoteVectorEnv([...]))"
)


#: What the vector client says of a one-env endpoint (client/_env.py).
_SINGLE_ENV = "serves a single environment"


def _one_env_endpoint(error: str, num_envs: int) -> str:
    """``gymnasium.make_vec("rlmesh/Remote-v0", num_envs=N, address=...)`` on a one-env endpoint.

    >>> print(_one_env_endpoint("Endpoint 'tcp://127.0.0.1:5555' serves a single environment (num_envs=1).", 4))
    gymnasium.make_vec('rlmesh/Remote-v0', num_envs=4) needs 4 envs, but the endpoint at 'tcp://127.0.0.1:5555' serves a single env. Either serve 4 lanes there (rlmesh serve ENV --num-envs 4) and keep this call, or serve 4 sessions (rlmesh serve ENV --sessions 4) and pass vectorization_mode="sync" to make_vec: it opens one RemoteEnv, and so one session, per env
    """
    where = error.split("'")[1] if error.count("'") >= 2 else "this address"
    return (
        f"gymnasium.make_vec({REMOTE_ID!r}, num_envs={num_envs}) needs {num_envs} envs, but the endpoint "
        f"at '{where}' serves a single env. Either serve {num_envs} lanes there (rlmesh serve ENV "
        f"--num-envs {num_envs}) and keep this call, or serve {num_envs} sessions (rlmesh serve ENV "
        f'--sessions {num_envs}) and pass vectorization_mode="sync" to make_vec: it opens one '
        "RemoteEnv, and so one session, per env"
    )


def _shared_step_error(address: str) -> EndpointBusy:
    return EndpointBusy(
        f"two Gymnasium handles in this process share the one session of the env at '{address}', and the "
        f"other handle reset it since this one did: stepping now would step the other's episode. {_ONE_SESSION_HINT}"
    )


def _spec_of(
    client: Any, *, vector: bool = False, kwargs: Mapping[str, Any] | None = None
) -> EnvSpec | None:
    """A Gymnasium ``EnvSpec`` for the served env: its id and, where published, ``max_episode_steps``."""
    md = client.metadata
    steps = md.get("max_episode_steps") if isinstance(md, Mapping) else None
    steps = (
        int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    )
    try:
        return EnvSpec(
            id=client.env_contract.id,
            entry_point=f"rlmesh.gymnasium:{'RemoteVectorEnv' if vector else 'RemoteEnv'}",
            max_episode_steps=steps,
            kwargs=dict(kwargs or {}),
        )
    except Exception:  # an id Gymnasium cannot parse: no spec rather than a failure
        return None
