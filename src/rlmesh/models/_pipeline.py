"""The stages of a local route's pipeline, each fixed once when the route binds (EVAL-13).

A :class:`~rlmesh.models._local.LocalRoute` turns an env observation into an
env-ready action through stages that depend only on the model's spec and the env's
contract, so they are chosen at bind time and then only called:

- the adapter: :func:`resolve_adapter` matches the model's spec against the env's
  tags (MOD-27), and :func:`check_history_budget` refuses frame windows that would
  hold too many bytes (DELTA-48);
- the canonical observation: :func:`observation_plan` encodes a local env's
  observation as a served model would receive it (VAL-6, MOD-1);
- the instruction: :func:`text_placements` finds the spec's ``Text`` slots and
  :func:`inject` writes the instruction there (MOD-30);
- the action cast: :func:`box_caster` turns the adapter's flat float32 action into the
  env's Box dtype and shape (DELTA-48);
- a failing forward: :func:`annotate` adds the model input's :func:`input_signature`
  to the exception (MOD-38).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import _keys, adapters as _adapters
from .._plan import value_plan
from ..errors import AdapterResolutionError
from ..spaces._gym import as_spec
from ..tensor import Tensor
from ._sentinels import NO_ADAPTER

__all__ = [
    "ENV_TAGS_KEY",
    "FRAME_HISTORY_LIMIT_BYTES",
    "annotate",
    "box_caster",
    "check_history_budget",
    "inject",
    "input_signature",
    "observation_plan",
    "resolve_adapter",
    "text_placements",
]

#: Where env adapter tags live in contract metadata (ADP-136).
ENV_TAGS_KEY = _keys.ENV_TAGS_KEY


def resolve_adapter(spec: Any, contract: Any, *, trust_entrypoints: bool) -> Any:
    """Resolve a model's adapter against an env contract (MOD-27); ``None`` means raw IO.

    Raises:
        AdapterResolutionError: ``spec=None`` on a tagged env, a spec that is not a
            ``ModelSpec``, or a resolution failure.
    """
    if spec is NO_ADAPTER:
        return None
    metadata = getattr(contract, "metadata", None) or {}
    if spec is None:
        if isinstance(metadata, Mapping) and ENV_TAGS_KEY in metadata:
            raise AdapterResolutionError(
                "the env publishes adapter tags but the model has no spec; pass "
                "spec=ModelSpec(...) to adapt observations/actions, or spec=NO_ADAPTER to drive "
                "the raw env values yourself"
            )
        return None
    adapters: Any = _adapters
    model_spec = getattr(adapters, "ModelSpec", None)
    adapter_base = getattr(adapters, "AdapterBase", None)
    if adapter_base is not None and isinstance(spec, adapter_base):
        return spec  # an already-resolved or custom adapter (ADP-131/133)
    if model_spec is None or not isinstance(spec, model_spec):
        raise AdapterResolutionError(
            f"model spec must be a ModelSpec or NO_ADAPTER, got {type(spec).__name__}"
        )
    return adapters.resolve_from_contract(contract, spec, trust_entrypoints=trust_entrypoints)


# -- instruction placements (MOD-30) -----------------------------------------------------


def text_placements(spec: Any) -> list[tuple[tuple[Any, ...], bool]]:
    """``(path, as_list)`` of every ``Text`` leaf in a spec's input tree."""
    text_cls = getattr(_adapters, "Text", None)
    out: list[tuple[tuple[Any, ...], bool]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if text_cls is not None and isinstance(node, text_cls):
            out.append((path, getattr(node, "container", "str") == "list"))
        elif isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(getattr(spec, "input", None), ())
    return out


def inject(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    """Write ``value`` at ``path``, rebuilding only the touched containers (never mutating)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(payload, tuple):
        items = list(payload)
        items[head] = inject(items[head], rest, value)
        return tuple(items)
    if isinstance(payload, list):
        items = list(payload)
        items[head] = inject(items[head], rest, value)
        return items
    out = dict(payload) if isinstance(payload, Mapping) else {}
    out[head] = inject(out.get(head, {}), rest, value)
    return out


# -- failure annotation (MOD-38) -----------------------------------------------------------


def input_signature(value: Any, depth: int = 0) -> str:
    """A compact description of a model input: ``{image: uint8[8, 8, 3], state: float32[7]}``."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k}: {input_signature(v, depth + 1)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, (np.ndarray, Tensor)):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, str):
        return f"text(len={len(value)})"
    if isinstance(value, (bytes, bytearray)):
        return f"bytes(len={len(value)})"
    if isinstance(value, tuple):
        return "(" + ", ".join(input_signature(v, depth + 1) for v in value) + ")"
    if isinstance(value, list):
        first = input_signature(value[0], depth + 1) if value and depth < 3 else "-"
        return f"list(len={len(value)}, first={first})"
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{value.dtype}{list(shape)}"
    return type(value).__name__


def annotate(exc: BaseException, spec_less: bool, model_input: Any) -> None:
    """Note on ``exc`` which model input the failing forward saw (MOD-38; Python >= 3.11)."""
    if sys.version_info >= (3, 11):
        kind = "spec-less (raw obs)" if spec_less else "adapter-assembled"
        exc.add_note(f"{kind} model input: {input_signature(model_input)}")


# -- frame-history budget (DELTA-48) --------------------------------------------------------

#: Default bound on the bytes of frame history a session may hold (DELTA-48).
FRAME_HISTORY_LIMIT_BYTES = 2 * 1024**3
_HISTORY_ENV = "RLMESH_FRAME_HISTORY_LIMIT_BYTES"


def check_history_budget(adapter: Any, lanes: int) -> None:
    """Refuse an adapter whose frame windows would hold more than the limit (DELTA-48)."""
    windows = getattr(adapter, "history_windows", None)
    if adapter is None or not callable(windows):
        return
    total = lanes * sum(int(span) * int(nbytes) for _place, span, nbytes in windows())
    raw = os.environ.get(_HISTORY_ENV, "").strip()
    limit = int(raw) if raw.isdigit() else FRAME_HISTORY_LIMIT_BYTES
    if total > limit:
        raise ValueError(
            f"frame history would hold {total} bytes ({lanes} env(s) x the adapter's frame "
            f"windows), over the {limit}-byte limit; lower Image(stack=...) / the image size, "
            f"or raise {_HISTORY_ENV}"
        )


# -- action cast (DELTA-48) ----------------------------------------------------------------


def box_caster(space: Any) -> Callable[[Any], Any] | None:
    """Cast an adapter's flat float32 action to the env's Box dtype and shape, or ``None``."""
    kind = getattr(space, "kind", None)
    if kind is None:
        kind = "box" if type(space).__name__ == "Box" else None
        spec = getattr(space, "spec", None)
        if kind is None and spec is not None and getattr(spec, "kind", None) == "box":
            space, kind = spec, "box"
    if kind != "box":
        return None
    shape = tuple(int(d) for d in space.shape)
    dtype = np.dtype(str(space.dtype))
    if dtype.kind == "f":
        return lambda a: np.asarray(a).astype(dtype, copy=False).reshape(shape)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None

    def cast(a: Any) -> Any:
        arr = np.asarray(a)
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise ValueError(
                    f"adapter action {arr.tolist()} is not integral; the env's action space is "
                    f"{dtype.name}{list(shape)}"
                )
            if info is not None and (
                arr.min(initial=0) < info.min or arr.max(initial=0) > info.max
            ):
                raise ValueError(f"adapter action {arr.tolist()} is out of range for {dtype.name}")
        return arr.astype(dtype).reshape(shape)

    return cast


# -- the canonical observation (VAL-6, MOD-1) ----------------------------------------------


def observation_plan(observation_space: Any) -> Callable[[Any], Any] | None:
    """The encoder of one env observation into its canonical tree, or ``None`` without a space.

    A served model receives the canonical tree (the client encodes it for the wire); a
    local route encodes with the same compiled plan, so numpy scalars, lists and tuples
    reach the model exactly as they would over a connection (VAL-6, MOD-1). An
    observation that does not fit its space reaches the model as the env returned it:
    judging it is the env view's business (its validation policy), not the model's.
    """
    if observation_space is None:
        return None
    try:
        spec = as_spec(observation_space, "observation_space")
    except TypeError:
        return None  # a space rlmesh cannot carry: the env's own values go through
    encode = value_plan(spec).encode

    def canonical(observation: Any) -> Any:
        try:
            return encode(observation)
        except (ValueError, TypeError, KeyError):
            return observation

    return canonical
