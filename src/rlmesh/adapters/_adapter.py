"""``AdapterBase`` (the escape-hatch ABC) and ``Adapter`` (what ``resolve`` returns).

Anything built on adapters accepts any :class:`AdapterBase` (ADP-131): a
resolved :class:`Adapter`, a stateful subclass wrapping one, or a pair
override from a registry (ADP-133).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import numpy as np

from ._apply import OBS_KEY, OMIT, FrameStack, compile_image, compile_state, compile_text
from ._apply_action import compile_action, flatten_action
from ._describe import describe
from ._join import Advisory, render_path
from ._plans import CustomPlan, ImagePlan, Resolved, StatePlan, TextPlan

__all__ = ["Adapter", "AdapterBase"]

ActionT = TypeVar("ActionT")


class AdapterBase(ABC, Generic[ActionT]):
    """The adapter interface: subclass it for a whole custom adapter (ADP-131).

    >>> class Passthrough(AdapterBase):
    ...     def transform_obs(self, raw_obs):
    ...         return raw_obs
    ...     def transform_action(self, raw_action):
    ...         return raw_action
    >>> Passthrough().explain()
    'Passthrough (custom adapter)'
    >>> Passthrough().wrap_predict(lambda obs: obs + 1)(1)
    2
    """

    @abstractmethod
    def transform_obs(self, raw_obs: Any) -> Any:
        """Env observation -> model payload."""

    @abstractmethod
    def transform_action(self, raw_action: Any) -> ActionT:
        """Model output -> env action."""

    def reset(self) -> None:
        """Clear episode state (frame stacks, ensembles ...); a no-op by default."""

    def observe(self, raw_obs: Any) -> None:
        """Advance episode state for an env step that made no prediction (DELTA-69); no-op by default."""

    def explain(self) -> str:
        """A one-paragraph summary; custom adapters say what they are."""
        return f"{type(self).__name__} (custom adapter)"

    def describe(self) -> str:
        """Same text as :meth:`explain` (ADP-5)."""
        return self.explain()

    def advisories(self) -> list[Advisory]:
        """Non-fatal notes; none for a custom adapter."""
        return []

    def history_keys(self) -> tuple[str, ...]:
        """Placements holding per-episode history (none by default)."""
        return ()

    def wrap_predict(self, fn: Callable[[Any], Any]) -> Callable[[Any], ActionT]:
        """``lambda obs: transform_action(fn(transform_obs(obs)))`` (ADP-131)."""

        def predict(obs: Any) -> ActionT:
            return self.transform_action(fn(self.transform_obs(obs)))

        predict.__wrapped__ = fn  # type: ignore[attr-defined]
        return predict


_GAP: Any = object()


def _place(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    """Set ``value`` at ``path``, creating dict/list containers on demand (ADP-100)."""
    if not path:
        return value
    seg, rest = path[0], path[1:]
    if isinstance(seg, str):
        if payload is None:
            payload = {}
        payload[seg] = _place(payload.get(seg) if rest else None, rest, value)
    else:
        if payload is None:
            payload = []
        while len(payload) <= seg:
            payload.append(_GAP)
        child = payload[seg] if rest and payload[seg] is not _GAP else None
        payload[seg] = _place(child, rest, value)
    return payload


def _fill_gaps(payload: Any) -> Any:
    """List gaps (omitted slots) become ``{}`` (ADP-100)."""
    if isinstance(payload, list):
        return [{} if v is _GAP else _fill_gaps(v) for v in payload]
    if isinstance(payload, dict):
        return {k: _fill_gaps(v) for k, v in payload.items()}
    return payload


class Adapter(AdapterBase[np.ndarray]):
    """A resolved adapter: returned by :func:`resolve`, never built directly.

    Attributes:
        stacks: ``{placement: depth}`` for stacked image inputs (ADP-68).
        referenced_obs_keys: Top-level observation keys the plan reads.
    """

    def __init__(self, resolved: Resolved) -> None:
        self._r = resolved
        root_dict = resolved.root_dict
        self._root_dict = root_dict
        self._prev: dict[tuple[int, int], np.ndarray[Any, Any]] = {}
        self._slots: list[tuple[tuple[Any, ...], Callable[[Any], Any]]] = []
        self._customs: list[tuple[tuple[Any, ...], Any]] = []
        self._stacks: dict[int, FrameStack] = {}
        self._stack_fns: list[tuple[int, Callable[[Any], Any]]] = []
        for i, plan in enumerate(resolved.plans):
            if isinstance(plan, ImagePlan):
                fn = compile_image(plan, root_dict)
                if plan.stack > 1:
                    self._stacks[i] = self._make_stack(plan, fn)
                    self._stack_fns.append((i, fn))
                    fn = self._stacked(i, fn)
            elif isinstance(plan, StatePlan):
                fn = compile_state(plan, root_dict, self._prev)
            elif isinstance(plan, TextPlan):
                fn = compile_text(plan, root_dict)
            else:
                assert isinstance(plan, CustomPlan)
                self._customs.append((plan.placement, plan.fn))
                continue
            self._slots.append((plan.placement, fn))
        self._flat_keys = (
            all(len(p) == 1 and isinstance(p[0], str) for p, _ in self._slots) and not self._customs
        )
        self._root_value = len(resolved.plans) == 1 and resolved.plans[0].placement == ()
        self._action = compile_action(resolved.action)
        self._has_shims = any(s.custom is not None for s in resolved.action.segments)
        self._text = describe(resolved)
        self.stacks = {render_path(resolved.plans[i].placement): resolved.plans[i].leaf.stack  # type: ignore[union-attr]
                       for i in self._stacks}  # fmt: skip
        self.referenced_obs_keys = resolved.referenced_keys

    def _make_stack(self, plan: ImagePlan, fn: Callable[[Any], Any]) -> FrameStack:
        leaf = plan.leaf
        offsets = leaf.offsets if leaf.offsets is not None else tuple(range(1 - leaf.stack, 1))
        black: Callable[[], Any] = lambda: None  # noqa: E731
        if leaf.stack_pad == "black" and plan.feature is not None:
            feat = plan.feature
            zeros = np.zeros(
                feat.shape,
                dtype=np.dtype(feat.dtype) if feat.dtype not in ("unspecified",) else np.uint8,
            )
            cache: list[Any] = []
            path = feat.path

            def black() -> Any:
                if not cache:
                    env: dict[str, Any] = {}
                    _place_env(env, path, zeros, self._root_dict)
                    cache.append(fn(env))
                return cache[0]

        return FrameStack(offsets, leaf.stack_pad, black)

    def _stacked(self, i: int, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        stack = self._stacks[i]

        def stacked(env: Any) -> Any:
            stack.push(fn(env))
            return stack.emit()

        return stacked

    # -- envelope (ADP-97) ---------------------------------------------------------------------
    def _envelope(self, raw: Any) -> Mapping[str, Any]:
        if isinstance(raw, Mapping) and (self._root_dict or (OBS_KEY in raw and len(raw) == 1)):
            return raw
        return {OBS_KEY: raw}

    def transform_obs(self, raw_obs: Any) -> Any:
        """Env observation -> the model's payload (dict, list or bare value) (ADP-97..108)."""
        env = self._envelope(raw_obs)
        if self._flat_keys:
            payload: Any = {}
            for path, fn in self._slots:
                v = fn(env)
                if v is not OMIT:
                    payload[path[0]] = v
            return payload
        if self._root_value and self._slots:
            v = self._slots[0][1](env)
            return {} if v is OMIT else v
        payload = None
        for path, fn in self._slots:
            v = fn(env)
            if v is not OMIT:
                payload = _place(payload, path, v)
        for path, custom in self._customs:  # ADP-101: after the declarative values
            payload = _place(payload, path, custom(env))
        return {} if payload is None else _fill_gaps(payload)

    def observe(self, raw_obs: Any, *, input_bridge: Any = None) -> None:
        """Advance frame windows for an env step that made no prediction (DELTA-69)."""
        if not self._stack_fns:
            return
        env = self._envelope(raw_obs)
        for i, fn in self._stack_fns:
            self._stacks[i].push(fn(env))

    def transform_action(self, raw_action: Any) -> np.ndarray[Any, Any]:
        """Model output -> env action: a 1-D float32 array of the env action width (ADP-110/111)."""
        if self._has_shims and isinstance(raw_action, Mapping):
            raise TypeError(
                "a model action with custom-encoded actuators must be a flat array action, not a mapping"
            )
        v = flatten_action(raw_action, self._r.action.in_dim)
        if self._r.action.model_slices:
            for sl in self._r.action.model_slices.values():
                self._prev[sl] = v[sl[0] : sl[1]].copy()
        return self._action(v)

    def reset(self) -> None:
        """Clear frame windows and previous-action state (episode boundary, ADP-108)."""
        for s in self._stacks.values():
            s.clear()
        self._prev.clear()

    # -- introspection -------------------------------------------------------------------------
    def explain(self) -> str:
        """The derived plan in the pinned text grammar (ADP-87..93)."""
        return self._text

    def describe(self) -> str:
        """Same as :meth:`explain` (ADP-5)."""
        return self._text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<Adapter {len(self._r.plans)} input(s) -> {self._r.action.out_dim}-dim action>"

    def advisories(self) -> list[Advisory]:
        """Resolve-time (sorted) + join + data-loss notes, in that order (ADP-94)."""
        r = self._r
        resolve = sorted(r.resolve_advisories + r.silent_advisories, key=lambda a: a.message)
        return resolve + list(r.join_advisories) + list(r.loss_advisories)

    def history_keys(self) -> tuple[str, ...]:
        """Placements holding per-episode history: frame windows or previous-action parts (DELTA-69)."""
        keys = [render_path(self._r.plans[i].placement) for i in self._stacks]
        for plan in self._r.plans:
            if isinstance(plan, StatePlan) and any(x.kind == "previous" for x in plan.pieces):
                keys.append(render_path(plan.placement))
        return tuple(keys)

    def history_windows(self) -> tuple[tuple[str, int, int], ...]:
        """``(placement, span, frame_bytes)`` per frame window; ``frame_bytes`` 0 when unknown."""
        out = []
        for i, s in self._stacks.items():
            plan = self._r.plans[i]
            assert isinstance(plan, ImagePlan)
            nbytes = 0
            if plan.feature is not None:
                h, w = plan.size or (plan.feature.height, plan.feature.width)
                nbytes = h * w * plan.feature.channels * np.dtype(plan.leaf.dtype).itemsize
            out.append((render_path(plan.placement), s.span, nbytes))
        return tuple(out)

    @property
    def action_dim(self) -> int:
        """The model output width this adapter expects."""
        return self._r.action.in_dim

    @property
    def env_action_dim(self) -> int:
        """The env action width this adapter produces."""
        return self._r.action.out_dim

    def text_placements(self) -> tuple[tuple[tuple[str | int, ...], str], ...]:
        """``(placement path, container)`` of every Text input, for ``instruction=`` injection (MOD-30)."""
        return tuple((p.placement, p.container) for p in self._r.plans if isinstance(p, TextPlan))

    def serve_route(self) -> dict[str, Any]:
        """A JSON-able summary a serving route needs: keys read, stacks, history, widths."""
        return {
            "referenced_obs_keys": list(self.referenced_obs_keys),
            "stacks": dict(self.stacks),
            "history_keys": list(self.history_keys()),
            "model_action_dim": self.action_dim,
            "env_action_dim": self.env_action_dim,
        }


def _place_env(env: dict[str, Any], path: tuple[Any, ...], value: Any, root_dict: bool) -> None:
    if not root_dict:
        env[OBS_KEY] = _place(None, path, value) if path else value
        return
    env[path[0]] = _place(None, path[1:], value) if len(path) > 1 else value
