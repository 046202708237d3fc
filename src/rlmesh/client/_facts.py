"""What a connected env client tells about its endpoint (CLT-7): address, ids, contract,
edition, render mode, metadata and spaces.

A base of :class:`rlmesh.client._env._RemoteEnvBase`, which sets the attributes below when
it connects; :meth:`EnvFacts._accept_contract` takes the contract the handshake published.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from .._bridge import Bridge
from .._contract import EnvContract
from ..errors import InvalidContract
from ..spaces import space_from_spec
from ..spaces._spec import SpaceSpec
from ._opaque import bind_remote_peers
from ._session import ClientSession

__all__ = ["EnvFacts"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class EnvFacts:
    """The read-only facts of a connected env client."""

    _bridge: ClassVar[Bridge]
    _vector: ClassVar[bool]
    _session: ClientSession
    _address: str
    _env_id: str
    _contract: EnvContract
    _selected_edition: str
    _metadata: Mapping[str, Any] | None
    _obs_space: Any
    _act_space: Any

    def _accept_contract(self, url: str) -> EnvContract:
        """Take the contract the handshake at ``url`` published (the session is detached if it is unusable)."""
        welcome = self._session.welcome
        try:
            contract = EnvContract.from_dict(welcome.contract)
        except ValueError as exc:
            self._session.detach()
            raise InvalidContract(
                f"the env at '{url}' published an invalid contract: {exc}; the server runs an "
                "incompatible rlmesh -- upgrade one side"
            ) from None
        self._check_arity(contract, url)
        bind_remote_peers(self, contract)  # opaque spaces: sample/contains ask the server
        self._address = url
        self._contract = contract
        self._selected_edition = welcome.selected
        return contract

    def _check_arity(self, contract: EnvContract, url: str) -> None:
        """A scalar client refuses a lane endpoint and a vector client a single env."""
        n = contract.num_envs
        if not self._vector and n > 1:
            self._session.detach()
            raise ValueError(
                f"Endpoint '{url}' serves {n} environments. Use RemoteVectorEnv instead."
            )
        if self._vector and n < 2:
            self._session.detach()
            raise ValueError(
                f"Endpoint '{url}' serves a single environment (num_envs={n}). Use RemoteEnv instead."
            )

    @property
    def address(self) -> str:
        """Endpoint address this client is connected to."""
        return self._address

    @property
    def env_id(self) -> str:
        """This connection's id (UUIDv7), distinct from ``env_contract.id``."""
        return self._env_id

    @property
    def env_contract(self) -> EnvContract:
        """Environment contract returned by the endpoint handshake."""
        return self._contract

    @property
    def spec(self) -> EnvContract:
        """Alias of :attr:`env_contract`."""
        return self._contract

    @property
    def selected_workflow_edition(self) -> str:
        """The workflow edition this connection negotiated with the env."""
        return self._selected_edition

    @property
    def render_mode(self) -> str | None:
        """Configured render mode reported by the endpoint."""
        return self._contract.render_mode

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Endpoint metadata reported by the contract (an empty mapping when none, MET-3)."""
        if self._metadata is None:
            md = self._contract.metadata
            if md is None:
                self._metadata = _EMPTY
            else:
                plain = dict(md)
                if self._vector:
                    plain = _restore_autoreset_enum(plain)
                self._metadata = MappingProxyType(plain)
        return self._metadata

    @property
    def observation_space_spec(self) -> SpaceSpec:
        return self._contract.observation_space

    @property
    def action_space_spec(self) -> SpaceSpec:
        return self._contract.action_space

    @property
    def observation_space(self) -> Any:
        """Observation space (per lane on vector clients), bound to this client's values."""
        if self._obs_space is None:
            self._obs_space = space_from_spec(self._contract.observation_space, bridge=self._bridge)
        return self._obs_space

    @property
    def action_space(self) -> Any:
        """Action space (per lane on vector clients), bound to this client's values."""
        if self._act_space is None:
            self._act_space = space_from_spec(self._contract.action_space, bridge=self._bridge)
        return self._act_space

    @property
    def closed(self) -> bool:
        return self._session.closed


def _restore_autoreset_enum(md: dict[str, Any]) -> dict[str, Any]:
    """MET-3: turn ``autoreset_mode`` back into gymnasium's enum when gymnasium is present."""
    raw = md.get("autoreset_mode")
    if not isinstance(raw, str):
        return md
    try:
        from gymnasium.vector import AutoresetMode
    except Exception:
        return md
    try:
        md["autoreset_mode"] = AutoresetMode(raw)
    except ValueError:
        pass
    return md
