"""One compiled value plan per space: encoder + codec + decoder assembled once (issue 10 item 3).

VAL-6 (what each flavour decodes to), VAL-10..15 (what pack accepts), the WIRE leaf layout
(``wire.values``): ``pack``/``unpack`` compose exactly the stages every endpoint used to
assemble by hand, and the plan is cached on the space spec.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlmesh._bridge import NUMPY, PLAIN
from rlmesh._plan import value_plan
from rlmesh.spaces import Box, Dict, Discrete, Text
from rlmesh.spaces._values import compile_encoder
from rlmesh.wire import (
    PREFIX_SIZE,
    decode_header,
    decode_prefix,
    messages as m,
    new_body,
    split_body,
)
from rlmesh.wire.messages import encode_message
from strategies import space_specs, values_for

SRC = Path(__file__).resolve().parents[3] / "src" / "rlmesh"


def _travel(scalars: list[Any], segments: list[Any]) -> tuple[list[Any], list[Any]]:
    """Through real frame bytes, as a socket carries them."""
    raw = bytearray()
    for b in encode_message(m.StepReply(obs=scalars), 1, segments):
        raw += memoryview(b).cast("B")
    layout = decode_prefix(bytes(raw[:PREFIX_SIZE]))
    body = new_body(layout)
    body[:] = raw[PREFIX_SIZE:]
    frame = split_body(layout, body)
    return decode_header(frame).obs, frame.segments


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=True)
        )
    return type(a) is type(b) and a == b


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), lanes=st.sampled_from([None, 1, 3]))
def test_pack_then_unpack_is_encode_then_decode(
    data: Any, lanes: int | None
) -> None:  # VAL-6, VAL-15
    spec = data.draw(space_specs())
    value = data.draw(values_for(spec, lanes))
    plan = value_plan(spec, lanes=lanes, bridge=NUMPY)
    back = plan.unpack(*_travel(*plan.pack(value)))
    assert _same(back, compile_encoder(spec, lanes=lanes)(value))
    plain = value_plan(spec, lanes=lanes, bridge=PLAIN)
    assert repr(plain.unpack(*_travel(*plain.pack(value)))) == repr(
        PLAIN.compile_decoder(spec, lanes=lanes)(back)
    )


def test_a_plan_is_compiled_once_per_space_lanes_and_bridge() -> None:
    spec = Dict({"pos": Box(-1.0, 1.0, (2,)), "mode": Discrete(3), "say": Text(4)}).spec
    plan = value_plan(spec)
    assert value_plan(spec) is plan and value_plan(spec, bridge="numpy") is plan
    assert value_plan(spec, lanes=2) is not plan and value_plan(spec, bridge="plain") is not plan
    assert plan.segment_count == 1 and plan.range_check is value_plan(spec).range_check


def test_a_spec_with_plans_still_pickles_and_compares_as_before() -> None:  # SPC-1
    spec = Box(0.0, 1.0, (3,)).spec
    value_plan(spec)
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and hash(back) == hash(spec) and back._plans is None
    with pytest.raises(AttributeError, match="immutable"):
        spec._kind = "discrete"  # type: ignore[misc]


def test_pack_refuses_what_the_encoder_refuses() -> None:  # VAL-11, CNF-5
    plan = value_plan(Discrete(3).spec)
    with pytest.raises(ValueError, match=r"^\$: Discrete value 3 not in range"):
        plan.pack(3)


def test_only_the_plan_assembles_encoder_codec_and_decoder() -> None:
    """Endpoints ask ``value_plan`` for their stages; none builds its own codec or encoder."""
    assembling = re.compile(r"\b(ValueCodec\(|compile_encoder\(|compile_decoder\()")
    allowed = {"_plan.py", "_bridge", "spaces", "wire"}
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if assembling.search(line) and not line.lstrip().startswith(("#", ">>>")):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []
