"""rlmesh.openpi: the openpi policy-server wire, at the edge of rlmesh.

The robot-learning policies people evaluate (pi0, pi0-FAST, pi0.5 and the VLAs that copied
the pattern) are served with openpi's WebSocket policy server: connect, receive the
server's metadata, then send observation dicts (numpy arrays and a ``"prompt"``, packed
with msgpack) and receive ``{"actions": [H, D]}`` chunks. This package speaks it both ways:

- :class:`PolicyClient` is an openpi server as an rlmesh model: ``rlmesh.run``,
  ``rlmesh.session``, ``workers=``, ``rlmesh eval ws://host:port ENV`` take it, and the
  session's chunk machinery (execution horizon, re-plan, prefetch) replays its chunks;
- ``rlmesh.serve.ModelServer(model, address, protocol="openpi")`` (``rlmesh serve-model
  TARGET --protocol openpi``) serves an rlmesh model to openpi clients
  (``openpi_client.websocket_client_policy.WebsocketClientPolicy`` among them).

rlmesh's own wire stays the default everywhere; this bridge needs the ``openpi`` extra
(``pip install "rlmesh-py[openpi]"``: websockets and msgpack), loaded on first use.
See docs/openpi.md.
"""

from __future__ import annotations

from ._client import ACTIONS_KEY as ACTIONS_KEY, PolicyClient as PolicyClient
from ._codec import packb as packb, unpackb as unpackb
from ._obsmap import (
    DEFAULT_STATE_KEY as DEFAULT_STATE_KEY,
    PROMPT_KEY as PROMPT_KEY,
    Image as Image,
    State as State,
    obs_map_from_json as obs_map_from_json,
)

__all__ = [
    "ACTIONS_KEY",
    "DEFAULT_STATE_KEY",
    "PROMPT_KEY",
    "Image",
    "PolicyClient",
    "State",
    "obs_map_from_json",
    "packb",
    "unpackb",
]
