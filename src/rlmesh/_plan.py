"""One compiled value plan per space: user value <-> wire payload (issue 10 item 3).

Every value that crosses a connection goes through the same three stages, each
compiled once from the space spec:

=============  ===================================================  =========================
stage          does                                                 from
=============  ===================================================  =========================
``encode``     user/env value -> canonical tree (coerce, CNF-2)     ``spaces._values``
``split``      canonical tree -> (header scalars, segments)         ``wire.values.ValueCodec``
``join``       (header scalars, segments) -> canonical tree         ``wire.values.ValueCodec``
``decode``     canonical tree -> the bridge's values (VAL-6)        ``_bridge.Bridge``
=============  ===================================================  =========================

:func:`value_plan` builds a :class:`ValuePlan` for ``(spec, lanes, bridge)`` once and
caches it on the spec object, so every client, server and model route of a space
shares one set of compiled functions. ``pack(value)`` and ``unpack(scalars,
segments)`` run the whole way; callers that need the canonical tree in between (a
server checks ranges on it, a vector client keeps it to merge partial resets) call
the stages themselves. Each stage is the compiled function itself (an attribute,
not a method), so the step path pays no extra call.

>>> import numpy as np
>>> from rlmesh.spaces import Box, Dict, Discrete
>>> spec = Dict({"pos": Box(-1.0, 1.0, (2,)), "mode": Discrete(3)}).spec
>>> plan = value_plan(spec, bridge="numpy")
>>> scalars, segments = plan.pack({"pos": [0.5, 0.25], "mode": 2})
>>> scalars, [s.nbytes for s in segments]
([2], [8])
>>> plan.unpack(scalars, [s.reshape(-1).view(np.uint8) for s in segments])
{'pos': array([0.5 , 0.25], dtype=float32), 'mode': 2}
>>> value_plan(spec, bridge="numpy") is plan
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._bridge import NUMPY, Bridge, resolve_bridge
from .spaces._ranges import RangeCheck
from .spaces._spec import SpaceSpec
from .spaces._values import compile_encoder, compile_range_check
from .wire.values import ValueCodec

__all__ = ["ValuePlan", "value_plan"]

_MAX_PLANS_PER_SPEC = 64


class ValuePlan:
    """The compiled stages of one space (with ``lanes`` and a bridge); see the module doc.

    Attributes:
        spec: The space.
        lanes: ``None`` for one value, ``N`` for a batch of N lanes.
        bridge: The value bridge that ``decode`` (and ``pack``'s first step) speaks.
        encode: user/env value -> canonical tree (raises ``ValueError``/``TypeError``/``KeyError``).
        split: canonical tree -> ``(scalars, segments)``.
        join: ``(scalars, segments)`` -> canonical tree (raises ``ProtocolException``).
        decode: canonical tree -> the bridge's values.
        pack: the bridge's values -> ``(scalars, segments)``.
        unpack: ``(scalars, segments)`` -> the bridge's values.
        segment_count: Segments every value of this space produces.
    """

    __slots__ = (
        "_range",
        "bridge",
        "decode",
        "encode",
        "join",
        "lanes",
        "leaf",
        "pack",
        "segment_count",
        "spec",
        "split",
        "unpack",
    )

    def __init__(self, spec: SpaceSpec, lanes: int | None, bridge: Bridge) -> None:
        self.spec = spec
        self.lanes = lanes
        self.bridge = bridge
        codec = ValueCodec(spec, lanes)
        self.segment_count = codec.segment_count
        #: ``"segment"`` / ``"scalar"`` when the value is one leaf at the root (``split``
        #: is then ``([], [v])`` / ``([v], [])``), else ``None``.
        self.leaf: str | None = codec._leaf
        encode = self.encode = compile_encoder(spec, lanes=lanes)
        split = self.split = codec.split
        join = self.join = codec.join
        decode = self.decode = bridge.compile_decoder(spec, lanes=lanes)
        self._range: RangeCheck | bool | None = False  # False: not compiled yet
        to_host = bridge.encode

        def pack(value: Any) -> tuple[list[Any], list[Any]]:
            return split(encode(to_host(value)))

        def pack_host(
            value: Any,
        ) -> tuple[list[Any], list[Any]]:  # plain/numpy: encode is the identity
            return split(encode(value))

        def unpack(scalars: list[Any], segments: list[Any]) -> Any:
            return decode(join(scalars, segments))

        self.pack: Callable[[Any], tuple[list[Any], list[Any]]] = (
            pack_host if bridge.host_values else pack
        )
        self.unpack: Callable[[list[Any], list[Any]], Any] = unpack

    @property
    def range_check(self) -> RangeCheck | None:
        """The canonical tree's range deviations (CNF-3), or ``None`` when none is possible."""
        if self._range is False:
            self._range = compile_range_check(self.spec, lanes=self.lanes)
        return self._range  # type: ignore[return-value]

    def __repr__(self) -> str:
        lanes = "" if self.lanes is None else f", lanes={self.lanes}"
        return f"<ValuePlan {self.spec!r}{lanes}, bridge={self.bridge.name!r}>"


def value_plan(
    spec: SpaceSpec, *, lanes: int | None = None, bridge: str | Bridge | None = None
) -> ValuePlan:
    """The value plan of ``spec`` for ``lanes`` and ``bridge`` (default numpy), cached on ``spec``.

    Raises:
        ValueError: an unknown bridge name.
    """
    b = NUMPY if bridge is None else resolve_bridge(bridge)
    plans = spec._plans
    if plans is None:
        plans = {}
        spec._plans = plans
    key = (lanes, b)
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= _MAX_PLANS_PER_SPEC:  # many distinct partial-reset sizes: start over
            plans.clear()
        plan = plans[key] = ValuePlan(spec, lanes, b)
    return plan
