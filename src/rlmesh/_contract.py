"""``EnvContract``: what an env endpoint publishes at handshake (SRV-10..15)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ._autoreset import Autoreset
from .spaces._spec import MAX_SPACE_ELEMENTS, SpaceSpec, value_nbytes
from .wire.frames import default_limits

__all__ = [
    "AUTORESET_MODES",
    "MAX_LANES",
    "UNKNOWN_ENV_ID",
    "EnvContract",
    "check_bound_size",
    "check_servable",
    "max_bound_bytes",
]

UNKNOWN_ENV_ID = "UnknownEnv-v1"  # SRV-11
#: Wire names of the autoreset modes (AR-1/AR-2).
AUTORESET_MODES = tuple(mode.value for mode in Autoreset)

#: Most lanes a contract read from a peer (``num_envs``) or a model ``Bind`` may declare.
#: Large GPU simulators run a few thousand lanes; a served model builds one route per lane,
#: so a hostile two-million-lane Bind used to cost a minute and gigabytes (issue 28).
MAX_LANES = 16384


def max_bound_bytes() -> int:
    """Most bytes one lane-batched observation plus one action of a peer's contract may take.

    1 GiB, or four frames when ``RLMESH_MAX_FRAME_BYTES`` raises the frame limit above
    256 MiB: anything larger could never travel, so it is refused before it is built.
    """
    return max(1 << 30, 4 * default_limits().max_frame_bytes)


def check_bound_size(
    observation_space: SpaceSpec, action_space: SpaceSpec, lanes: int, what: str
) -> None:
    """Refuse a peer's declaration whose lanes or bytes are over the limits (issue 28).

    Raises:
        ValueError: ``lanes`` over :data:`MAX_LANES`, or the lane-batched observation plus
            action over :func:`max_bound_bytes`; the message names the limit.
    """
    if lanes > MAX_LANES:
        raise ValueError(
            f"{what} declares {lanes} lanes, over the limit of {MAX_LANES} lanes (MAX_LANES)"
        )
    total = (value_nbytes(observation_space) + value_nbytes(action_space)) * lanes
    limit = max_bound_bytes()
    if total > limit:
        raise ValueError(
            f"{what} declares {total} bytes for one observation plus one action over {lanes} lane(s), "
            f"over the limit of {limit} bytes (raise RLMESH_MAX_FRAME_BYTES on both ends for larger values)"
        )


def check_servable(contract: EnvContract, plain: Mapping[str, Any] | None = None) -> None:
    """Refuse, when a server is built, a contract its own clients would refuse at handshake.

    The checks :meth:`EnvContract.from_dict` makes on a contract read from a peer (elements
    per space, lanes, bytes), made on the server's own contract (``plain``: its
    :meth:`~EnvContract.to_dict`, when already computed).

    Raises:
        ValueError: naming the space, the limit and its name.
    """
    if contract.num_envs > MAX_LANES:
        raise ValueError(
            f"the env has {contract.num_envs} lanes, over the limit of {MAX_LANES} lanes a client "
            "accepts (MAX_LANES): serve fewer lanes per endpoint (several endpoints, or sessions)"
        )
    d = contract.to_dict() if plain is None else plain
    for name in ("observation_space", "action_space"):
        _check_elements(d[name], f"the env's {name}")
    try:
        check_bound_size(
            contract.observation_space, contract.action_space, contract.num_envs, "the env"
        )
    except ValueError as exc:
        raise ValueError(f"{exc}; a client refuses such a contract at handshake") from None


def _check_elements(space: Mapping[str, Any], where: str) -> None:
    """A space's leaves within :data:`MAX_SPACE_ELEMENTS` (a plain ``_to_dict()`` form)."""
    todo = [(space, where)]
    while todo:
        sp, path = todo.pop()
        kind, details = sp.get("kind"), sp.get("details") or {}
        if kind in ("box", "multi_binary", "multi_discrete"):
            numel = 1
            for dim in sp.get("shape", []):
                numel *= int(dim)
            what = f"a {kind} of shape {list(sp.get('shape', []))} ({numel} elements)"
        elif kind == "text":
            numel = int(details.get("max_length", 0))
            what = f"a text of max_length {numel}"
        else:
            children = details.get("spaces")
            if isinstance(children, Mapping):
                todo += [(child, f"{path}[{key!r}]") for key, child in children.items()]
            elif isinstance(children, (list, tuple)):
                todo += [(child, f"{path}[{i}]") for i, child in enumerate(children)]
            continue
        if numel > MAX_SPACE_ELEMENTS:
            raise ValueError(
                f"{path} is {what}, over the limit of {MAX_SPACE_ELEMENTS} elements per space a "
                "client accepts (MAX_SPACE_ELEMENTS): split it into smaller spaces (a Dict of "
                "parts) or send it another way"
            )


class EnvContract:
    """The immutable contract of an env endpoint.

    Attributes:
        id: The env id (``env.spec.id``) or ``"UnknownEnv-v1"``.
        observation_space: Per-lane observation :class:`~rlmesh.spaces.SpaceSpec`.
        action_space: Per-lane action :class:`~rlmesh.spaces.SpaceSpec`.
        render_mode: The env's render mode, or ``None``.
        num_envs: Lanes served (1 for a scalar endpoint).
        metadata: The env metadata (sanitized plain values), or ``None``.
        autoreset_mode: ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.
    """

    __slots__ = (
        "_action_space",
        "_autoreset_mode",
        "_id",
        "_metadata",
        "_num_envs",
        "_observation_space",
        "_render_mode",
    )

    def __init__(
        self,
        id: str,
        observation_space: SpaceSpec,
        action_space: SpaceSpec,
        *,
        render_mode: str | None = None,
        num_envs: int = 1,
        metadata: Mapping[str, Any] | None = None,
        autoreset_mode: str = Autoreset.DISABLED.value,
    ) -> None:
        if autoreset_mode not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset_mode must be one of {AUTORESET_MODES}, got {autoreset_mode!r}"
            )
        self._id = id
        self._observation_space = observation_space
        self._action_space = action_space
        self._render_mode = render_mode or None
        self._num_envs = int(num_envs)
        self._metadata = None if metadata is None else MappingProxyType(dict(metadata))
        self._autoreset_mode = autoreset_mode

    @property
    def id(self) -> str:
        return self._id

    @property
    def observation_space(self) -> SpaceSpec:
        return self._observation_space

    @property
    def action_space(self) -> SpaceSpec:
        return self._action_space

    @property
    def render_mode(self) -> str | None:
        return self._render_mode

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def metadata(self) -> Mapping[str, Any] | None:
        return self._metadata

    @property
    def autoreset_mode(self) -> str:
        return self._autoreset_mode

    @property
    def env(self) -> EnvContract:
        """Alias of the contract itself (SRV-10)."""
        return self

    @property
    def spec(self) -> EnvContract:
        """Alias of the contract itself (SRV-10)."""
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; spaces in their ``_to_dict()`` form (SRV-10)."""
        return {
            "id": self._id,
            "render_mode": self._render_mode,
            "num_envs": self._num_envs,
            "metadata": None if self._metadata is None else _plain(self._metadata),
            "observation_space": self._observation_space._to_dict(),
            "action_space": self._action_space._to_dict(),
            "autoreset_mode": self._autoreset_mode,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EnvContract:
        """Rebuild a contract from :meth:`to_dict` output, validating the spaces.

        Raises:
            ValueError: the mapping does not describe a valid contract.
        """
        try:
            num_envs = d.get("num_envs", 1)
            if not isinstance(num_envs, int) or num_envs < 1:
                raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
            if num_envs > MAX_LANES:  # before any space is built
                raise ValueError(
                    f"the contract declares {num_envs} lanes, over the limit of {MAX_LANES} lanes (MAX_LANES)"
                )
            md = d.get("metadata")
            if md is not None and not isinstance(md, Mapping):
                raise ValueError("contract metadata must be a mapping or None")
            ident = d.get("id") or UNKNOWN_ENV_ID
            render_mode = d.get("render_mode")
            if not isinstance(ident, str) or (
                render_mode is not None and not isinstance(render_mode, str)
            ):
                raise ValueError("contract id and render_mode must be strings")
            obs, act = (
                SpaceSpec._from_dict(d["observation_space"]),
                SpaceSpec._from_dict(d["action_space"]),
            )
            check_bound_size(obs, act, num_envs, "the contract")
            return cls(
                ident,
                obs,
                act,
                render_mode=render_mode,
                num_envs=num_envs,
                metadata=md,
                autoreset_mode=d.get("autoreset_mode", Autoreset.DISABLED.value),
            )
        except KeyError as exc:
            raise ValueError(f"env contract is missing {exc}") from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EnvContract):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f'EnvContract(id="{self._id}", num_envs={self._num_envs})'


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
