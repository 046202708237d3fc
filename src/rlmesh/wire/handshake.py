"""Handshake: peer info, the Hello a client offers and how a server answers it (HS-1..12).

Compatibility is decided on the protocol generation (exact match, HS-1/HS-2) and
a mutual workflow edition: the server selects the highest edition in both offers
at or below each side's declaration (HS-4, DEC-2) and returns it in ``Welcome``.
Peer info is advisory and never gates anything (HS-9).
"""

from __future__ import annotations

import functools
import platform
import sys
from importlib import metadata as importlib_metadata
from typing import Any

from .._build import PROTOCOL_GENERATION, VERSION, offer_for, select_edition
from . import messages as m

__all__ = ["answer_hello", "make_hello", "peer_info"]

_FRAMEWORKS = ("numpy", "torch", "jax", "jaxlib", "gymnasium")


@functools.lru_cache(maxsize=8)
def peer_info(component: str) -> m.PeerInfo:
    """This process's peer info; framework versions read without importing them (HS-9)."""
    versions: dict[str, str] = {}
    for name in _FRAMEWORKS:
        try:
            versions[name] = importlib_metadata.version(name)
        except Exception:  # never raises (HS-9)
            continue
    system = platform.system().lower()
    os_name = {"darwin": "macos"}.get(system, system)
    try:
        os_version = platform.release()
    except Exception:
        os_version = ""
    return m.PeerInfo(
        component=component,
        package_version=VERSION,
        language="python",
        language_version=platform.python_version(),
        os=os_name,
        os_version=os_version,
        arch=platform.machine(),
        framework_versions=versions,
        extra={
            "rlmesh.implementation": "rlmesh-py",
            "python.implementation": sys.implementation.name,
        },
    )


def make_hello(
    component: str,
    declared: str | None,
    *,
    service: str = "env",
    capabilities: dict[str, str] | None = None,
    token: str | None = None,
) -> m.Hello:
    """The Hello a client sends: our generation, the editions we offer (DEC-1), advisory
    capabilities (HS-8) and the endpoint's token (``None``: none)."""
    editions, preferred = offer_for(declared)
    fields: dict[str, Any] = dict(
        generation=PROTOCOL_GENERATION,
        peer=peer_info(component),
        editions=editions,
        preferred=preferred,
        service=service,
        capabilities=dict(capabilities or {}),
    )
    if token:  # the trailing field only when there is a token: a Hello without one is unchanged
        return m.AuthHello(**fields, token=token)
    return m.Hello(**fields)


def answer_hello(
    hello: m.Hello,
    *,
    declared: str | None,
    service: str,
    component: str,
    session_id: str,
    contract: dict[str, object] | None = None,
    capabilities: dict[str, str] | None = None,
) -> m.Welcome | m.Incompatible:
    """The server's answer to a Hello: ``Welcome`` with the selected edition, or ``Incompatible``."""
    ours, preferred = offer_for(declared)
    if hello.generation.strip() != PROTOCOL_GENERATION:
        return m.Incompatible(
            message=f"protocol generation {hello.generation!r} not compatible with server {PROTOCOL_GENERATION}",
            generation=PROTOCOL_GENERATION,
            editions=ours,
        )
    if hello.service != service:
        return m.Incompatible(
            message=f"this endpoint serves the {service} service; the client asked for the {hello.service} service",
            generation=PROTOCOL_GENERATION,
            editions=ours,
        )
    selected = select_edition(hello.editions, ours, ceilings=(hello.preferred, declared))
    if selected is None:
        return m.Incompatible(
            message=(
                f"no mutual workflow edition with the {service}: {service} offered {ours}, "
                f"the client offered {list(hello.editions)}"
            ),
            generation=PROTOCOL_GENERATION,
            editions=ours,
        )
    return m.Welcome(
        generation=PROTOCOL_GENERATION,
        peer=peer_info(component),
        editions=ours,
        preferred=preferred,
        selected=selected,
        session_id=session_id,
        contract=dict(contract or {}),
        capabilities=dict(capabilities or {}),
        service=service,
    )
