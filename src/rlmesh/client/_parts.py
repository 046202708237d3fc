"""The endpoints of a many-endpoint vector env: one client and its lanes each (see :mod:`._fanout`)."""

from __future__ import annotations

from typing import Any, ClassVar

from .._bridge import NUMPY, Bridge
from .._contract import EnvContract
from ..errors import EndpointLost
from ..transport.busypoll import FAN_OUT_CAPABILITY
from ._env import _RemoteEnvBase

__all__ = ["EndpointClient", "EndpointPart", "check_same"]


class EndpointClient(_RemoteEnvBase):
    """A NumPy client for a scalar or a vector endpoint; runtime keys go to ``runtime``."""

    _bridge: ClassVar[Bridge] = NUMPY
    # tells its server this client gathers many endpoints: the server then does not spin
    _hello_capabilities: ClassVar[dict[str, str]] = {FAN_OUT_CAPABILITY: "true"}
    _runtime_aside = True

    def _check_arity(self, contract: EnvContract, url: str) -> None:
        self._vector = contract.num_envs > 1  # type: ignore[misc]  # decided per endpoint


class EndpointPart:
    """One endpoint of a fan-out: its client, its lanes, and what is in flight."""

    __slots__ = (
        "address",
        "broken",
        "client",
        "index",
        "n",
        "needs_reset",
        "obs",
        "offset",
        "scalar",
        "sent",
    )

    def __init__(self, index: int, address: str, client: EndpointClient, offset: int) -> None:
        self.index = index
        self.address = address
        self.client = client
        self.offset = offset
        self.n = int(client._num_envs)
        self.scalar = not client._vector
        self.needs_reset = False  # a scalar lane that ended under NEXT_STEP resets on the next step
        self.obs: Any = None  # the latest batched observation of this endpoint's lanes
        self.sent: Any = None  # None, "step", "autoreset" or a reset context
        self.broken = False

    @property
    def lanes(self) -> range:
        return range(self.offset, self.offset + self.n)

    def name(self) -> str:
        return f"endpoint {self.index} ('{self.address}', lanes {self.offset}..{self.offset + self.n - 1})"

    def lost(self, what_now: str) -> EndpointLost:
        """``EndpointLost`` for this endpoint: ``"<name> was lost<what_now>"``, with its address and lanes."""
        return EndpointLost(
            f"{self.name()} was lost{what_now}",
            address=self.address,
            index=self.index,
            lanes=self.lanes,
        )


def check_same(part: EndpointPart, first: EndpointPart, what: str, mine: Any, theirs: Any) -> None:
    if mine != theirs:
        raise ValueError(
            f"{part.name()} has {what} space {mine!r}, but {first.name()} has {theirs!r}; every endpoint of "
            "one vector env must serve the same single-lane spaces"
        )
