"""The four prediction corners: signature detection and synthesis (MOD-12..18, DELTA-32).

A model defines any of ``predict`` (one obs -> one action), ``predict_chunk``
(one obs -> ``[H, ...]`` actions), ``predict_batch`` (``[N, ...]`` obs -> ``[N, ...]``
actions) and ``predict_chunk_batch`` (``[N, ...]`` -> ``[N, H, ...]``). Here each
defined corner is *normalized* once, at construction, to a fixed calling
convention so the per-step path never inspects signatures again (P-3):

- ``predict(obs, ctx)`` and ``predict_batch(batch, ctxs)``;
- ``predict_chunk(obs, horizon, ctx)`` and ``predict_chunk_batch(batch, horizon, ctxs)``.

``ctx`` is passed on only when the user's function declares a ``context``
parameter (or ``*args``); ``horizon`` only when it declares a second positional
parameter (not named ``context``), ``*args``, or a keyword-only ``execution_horizon``.
Missing corners are then derived *downward* only (MOD-14): de-batch a batched
corner through a one-lane batch, or de-chunk a chunk corner by taking frame 0.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._values import Bridge, first_frame

__all__ = ["CORNER_NAMES", "CornerSet", "analyze_corner", "build_corners"]

CORNER_NAMES = ("predict", "predict_chunk", "predict_batch", "predict_chunk_batch")

_POS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class CornerShape:
    """How to call one user corner: where the horizon and the context go."""

    horizon: str  # "positional" | "keyword" | "none"
    context: str  # "positional" | "keyword" | "none"


def analyze_corner(fn: Callable[..., Any], *, chunk: bool) -> CornerShape:
    """Detect horizon (chunk corners only) and context parameters (MOD-13, MOD-18, DELTA-32).

    >>> analyze_corner(lambda obs, context: 0, chunk=False)
    CornerShape(horizon='none', context='keyword')
    >>> analyze_corner(lambda obs, h: 0, chunk=True)
    CornerShape(horizon='positional', context='none')
    >>> analyze_corner(lambda obs, context: 0, chunk=True)  # DELTA-32: context, not a horizon
    CornerShape(horizon='none', context='keyword')
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: obs only
        return CornerShape("none", "none")
    var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    ctx = next(
        (p for p in params if p.name == "context" and p.kind is not inspect.Parameter.VAR_KEYWORD),
        None,
    )
    if ctx is not None and ctx.kind is not inspect.Parameter.VAR_POSITIONAL:
        context = "positional" if ctx.kind is inspect.Parameter.POSITIONAL_ONLY else "keyword"
    elif var_pos:
        context = "positional"
    else:
        context = "none"
    horizon = "none"
    if chunk:
        others = [p for p in params if p.kind in _POS and p.name != "context"]
        if len(others) >= 2 or var_pos:
            horizon = "positional"
        elif any(
            p.name == "execution_horizon" and p.kind is inspect.Parameter.KEYWORD_ONLY
            for p in params
        ):
            horizon = "keyword"
    return CornerShape(horizon, context)


def _normalize_single(fn: Callable[..., Any], shape: CornerShape) -> Callable[[Any, Any], Any]:
    if shape.context == "keyword":
        return lambda obs, ctx: fn(obs, context=ctx)
    if shape.context == "positional":
        return lambda obs, ctx: fn(obs, ctx)
    return lambda obs, ctx: fn(obs)


def _normalize_chunk(fn: Callable[..., Any], shape: CornerShape) -> Callable[[Any, int, Any], Any]:
    h, c = shape.horizon, shape.context
    if h == "positional":
        if c == "keyword":
            return lambda obs, hz, ctx: fn(obs, hz, context=ctx)
        if c == "positional":
            return lambda obs, hz, ctx: fn(obs, hz, ctx)
        return lambda obs, hz, ctx: fn(obs, hz)
    if h == "keyword":
        if c == "keyword":
            return lambda obs, hz, ctx: fn(obs, execution_horizon=hz, context=ctx)
        if c == "positional":
            return lambda obs, hz, ctx: fn(obs, ctx, execution_horizon=hz)
        return lambda obs, hz, ctx: fn(obs, execution_horizon=hz)
    if c == "keyword":
        return lambda obs, hz, ctx: fn(obs, context=ctx)
    if c == "positional":
        return lambda obs, hz, ctx: fn(obs, ctx)
    return lambda obs, hz, ctx: fn(obs)


@dataclass
class CornerSet:
    """The four corners in normalized form; ``None`` when neither defined nor derivable.

    Attributes:
        defined: Names of the corners the model authored (describe's ``corners``).
        wants_context: Per corner, whether calling it needs a context (else pass ``None``).
    """

    predict: Callable[[Any, Any], Any] | None = None
    predict_chunk: Callable[[Any, int, Any], Any] | None = None
    predict_batch: Callable[[Any, Any], Any] | None = None
    predict_chunk_batch: Callable[[Any, int, Any], Any] | None = None
    defined: tuple[str, ...] = ()
    wants_context: dict[str, bool] = field(default_factory=dict)
    #: Corners derived by taking frame 0 of a chunk corner (native_chunk checks them).
    dechunked: set[str] = field(default_factory=set)

    @property
    def has_chunk(self) -> bool:
        """Whether a chunk corner exists (so ``execution_horizon > 1`` engages, EVAL-51)."""
        return self.predict_chunk is not None or self.predict_chunk_batch is not None


def build_corners(
    defined: dict[str, Callable[..., Any]], bridge: Bridge, *, owner: str
) -> CornerSet:
    """Normalize the authored corners and derive the missing ones (MOD-14, MOD-15).

    Args:
        defined: Corner name -> the user's (bound) callable, authored corners only.
        bridge: The model flavour's bridge (decides fusion and de-chunking).
        owner: Named in errors (the model class name).

    Raises:
        TypeError: no ``predict`` can be derived (MOD-15).
    """
    cs = CornerSet(defined=tuple(n for n in CORNER_NAMES if n in defined))
    want = cs.wants_context
    for name, fn in defined.items():
        chunk = "chunk" in name
        shape = analyze_corner(fn, chunk=chunk)
        want[name] = shape.context != "none"
        setattr(cs, name, _normalize_chunk(fn, shape) if chunk else _normalize_single(fn, shape))

    pcb = cs.predict_chunk_batch
    if pcb is not None:
        if cs.predict_chunk is None:
            cs.predict_chunk = _debatch_chunk(pcb, bridge)
            want["predict_chunk"] = want["predict_chunk_batch"]
        if cs.predict_batch is None and bridge.can_dechunk:
            cs.predict_batch = _dechunk_batch(pcb, bridge)
            want["predict_batch"] = want["predict_chunk_batch"]
            cs.dechunked.add("predict_batch")
    if cs.predict is None:
        # Tie rule: with both a batched and a chunk corner, predict stays un-chunked.
        if cs.predict_batch is not None:
            cs.predict = _debatch(cs.predict_batch, bridge)
            want["predict"] = want["predict_batch"]
            if "predict_batch" in cs.dechunked:
                cs.dechunked.add("predict")
        elif cs.predict_chunk is not None and bridge.can_dechunk:
            cs.predict = _dechunk(cs.predict_chunk)
            want["predict"] = want["predict_chunk"]
            cs.dechunked.add("predict")
    if cs.predict is None:
        raise TypeError(
            f"{owner}: could not derive predict() from the defined corners {list(cs.defined)}; "
            f"the {bridge.name} bridge cannot de-chunk a chunk corner. Define predict() or "
            "predict_batch(), or use rlmesh.numpy.Model"
        )
    return cs


def _debatch(pb: Callable[[Any, Any], Any], bridge: Bridge) -> Callable[[Any, Any], Any]:
    def predict(obs: Any, ctx: Any) -> Any:
        out = pb(bridge.tree_stack([obs]), None if ctx is None else [ctx])
        return bridge.tree_unstack(out, 1)[0]

    return predict


def _debatch_chunk(
    pcb: Callable[[Any, int, Any], Any], bridge: Bridge
) -> Callable[[Any, int, Any], Any]:
    def predict_chunk(obs: Any, horizon: int, ctx: Any) -> Any:
        out = pcb(bridge.tree_stack([obs]), horizon, None if ctx is None else [ctx])
        return bridge.tree_unstack(out, 1)[0]

    return predict_chunk


def _dechunk(pc: Callable[[Any, int, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda obs, ctx: first_frame(pc(obs, 1, ctx))


def _dechunk_batch(
    pcb: Callable[[Any, int, Any], Any], bridge: Bridge
) -> Callable[[Any, Any], Any]:
    return lambda batch, ctxs: bridge.dechunk_batch(pcb(batch, 1, ctxs))
