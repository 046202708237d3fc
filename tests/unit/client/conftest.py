"""The in-memory network every client test dials into (see ``_memory``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlmesh.client import _dial

from ._memory import Network


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> Iterator[Network]:
    """``rlmesh.client._dial.dial`` hands out in-memory sockets to scripted servers.

    Busy polling is off: it reads a real file descriptor, and an in-memory reply is
    always there by the time the client reads.
    """
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "0")
    network = Network()
    monkeypatch.setattr(_dial, "dial", network.dial)
    yield network
