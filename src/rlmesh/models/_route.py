"""Routes: how a session turns an env observation into an env-ready action (EVAL-13, EVAL-50/51).

A *route* is bound to an opened env once (corner choice, adapter resolution,
instruction placements, effective horizon) and then called every step. The local
route applies, in order: the adapter's observation transform, the model bridge,
the instruction, the corner (with its context if declared), then -- per frame of
a chunk -- the bridge back, the adapter's action transform and the cast to the
env's Box dtype/shape (DELTA-48). ``RandomRoute`` samples the action space, and
``ServedRoute`` asks a model server (it adapts the client's ``RemoteRoute``).

Every route speaks the one :class:`Route` protocol, so the drive (``rlmesh.eval``)
never tells them apart: bind once, begin/end episodes per lane, predict one
observation or all lanes of a batch, a read-only chunk position, close.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .. import _keys, adapters as _adapters
from .._bridge import NUMPY
from .._plan import value_plan
from ..errors import AdapterResolutionError
from ..spaces import space_from_spec
from ..spaces._gym import as_spec
from ..tensor import Tensor
from ._base import ModelBase
from ._context import EpisodeStore
from ._sentinels import NO_ADAPTER
from ._values import get_bridge, split_chunk, to_numpy_tree
from ._warn import user_stacklevel

__all__ = [
    "ENV_TAGS_KEY",
    "LocalRoute",
    "RandomRoute",
    "Route",
    "ServedRoute",
    "as_route",
    "input_signature",
    "resolve_adapter",
]

_NP = get_bridge("numpy")

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


def _annotate(exc: BaseException, spec_less: bool, model_input: Any) -> None:
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


# -- routes ----------------------------------------------------------------------------------


@runtime_checkable
class Route(Protocol):
    """How a session turns env observations into env-ready actions (local, served or random).

    ``bind`` once against the opened env side (its ``contract``, ``action_space``,
    ``single_action_space`` and whether its observations are already canonical);
    then per lane ``begin_episode`` / ``end_episode``; ``predict`` for one
    observation (a single env) or ``predict_lanes`` for a whole batch (a vector env:
    ``rolling[i]`` marks a lane whose action the env ignores this step; the route
    writes each lane's action into ``last_action`` and returns the batched action).
    ``chunk_pos`` / ``chunk_len`` are read only (the viewer's HUD).
    """

    @property
    def horizon(self) -> int:
        """Env steps one forward covers (the effective execution horizon)."""
        ...

    @property
    def spec_less(self) -> bool:
        """Whether the model sees the raw env values (no adapter)."""
        ...

    def bind(self, env: Any, *, lanes: int = 1) -> None: ...

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None: ...

    def end_episode(self, episode_id: str, lane: int = 0) -> None: ...

    def predict(self, observation: Any) -> Any: ...

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any: ...

    @property
    def chunk_pos(self) -> int:
        """1-based position in the chunk being replayed (0: none; the viewer's HUD reads it)."""
        ...

    @property
    def chunk_len(self) -> int:
        """Frames of the chunk being replayed (0: none)."""
        ...

    def advisories(self) -> tuple[Any, ...]: ...

    def close(self) -> None: ...


def _sample_lanes(
    space: Any, n: int, last_action: list[Any], rolling: Sequence[bool] | None
) -> Any:
    """Fill ``last_action`` with a sample for every lane (or only the rolling lanes still without one)."""
    for lane in range(n):
        if rolling is None or (rolling[lane] and last_action[lane] is None):
            last_action[lane] = space.sample()
    return _NP.tree_stack(last_action)


class RandomRoute:
    """``RANDOM_SAMPLE``: every predict samples the env's action space (MOD-29)."""

    horizon = 1
    spec_less = True
    chunk_pos = 0
    chunk_len = 0

    def __init__(self) -> None:
        self._sample: Callable[[], Any] | None = None
        self._space: Any = None
        self._single: Any = None
        self._vector = False

    def bind(self, env: Any, *, lanes: int = 1) -> None:
        space = env.action_space
        if space is None or not callable(getattr(space, "sample", None)):
            raise TypeError("RANDOM_SAMPLE needs an env whose action_space has sample()")
        self._space = space
        self._sample = space.sample
        self._vector = bool(getattr(env, "is_vector", False))
        self._single = getattr(env, "single_action_space", space) if self._vector else space

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        # A seeded episode samples reproducibly: the action space is seeded with it too
        # (a vector env's lanes sample the per-lane space unseeded).
        if not self._vector and seed is not None and callable(getattr(self._space, "seed", None)):
            self._space.seed(seed)

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        pass

    def predict(self, observation: Any) -> Any:
        assert self._sample is not None
        return self._sample()

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        """One sample of the per-lane action space per lane."""
        return _sample_lanes(self._single, len(last_action), last_action, None)

    def advisories(self) -> tuple[Any, ...]:
        return ()

    def close(self) -> None:
        pass


class ServedRoute:
    """A served model's route (``client.RemoteRoute``: one model lane per env lane) in the :class:`Route` shape."""

    chunk_pos = 0
    chunk_len = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner  # what a Session's repr names
        self._single: Any = None

    @property
    def horizon(self) -> int:
        return int(self.inner.horizon)

    @property
    def spec_less(self) -> bool:
        return bool(self.inner.spec_less)

    def bind(self, env: Any, *, lanes: int = 1) -> None:
        self._single = getattr(env, "single_action_space", None)
        self.inner.bind(env, lanes=lanes)

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        self.inner.begin_episode(episode_id, seed, lane)

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        self.inner.end_episode(episode_id, lane)

    def predict(self, observation: Any) -> Any:
        return self.inner.predict(observation)

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        """One request per lane that needs an action; a rolling lane repeats its last one."""
        n = len(last_action)
        per_obs = _NP.tree_unstack(to_numpy_tree(observation), n)
        predict_lane = self.inner.predict_lane
        for lane in range(n):
            if not rolling[lane]:
                last_action[lane] = predict_lane(per_obs[lane], lane)
        return _sample_lanes(self._single, n, last_action, rolling)

    def advisories(self) -> tuple[Any, ...]:
        return ()

    def close(self) -> None:
        self.inner.close()


def as_route(route: Any) -> Route:
    """``route`` in the :class:`Route` shape, as is when it has every member of the protocol.

    The client's ``RemoteRoute`` (one model lane per env lane: ``predict_lane``) is
    wrapped once in a :class:`ServedRoute`.
    """
    return route if isinstance(route, Route) else ServedRoute(route)


def has_tensor_leaf(tree: Any) -> bool:
    """Whether a value tree holds a :class:`~rlmesh.Tensor` leaf (a dtype numpy cannot hold)."""
    if isinstance(tree, Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(has_tensor_leaf(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(has_tensor_leaf(v) for v in tree)
    return False


#: MOD-37 drift tolerance: ``max(noise_floor * 8, 1e-6)``.
_PROBE_NOISE_FACTOR = 8.0
_PROBE_ATOL = 1e-6


def _numeric_leaves(value: Any) -> np.ndarray[Any, Any] | None:
    """All numeric leaves of an output, flattened to float64 (``None``: not comparable)."""
    out: list[np.ndarray[Any, Any]] = []

    def walk(v: Any) -> bool:
        if isinstance(v, Mapping):
            return all(walk(v[k]) for k in sorted(v, key=str))
        if isinstance(v, (list, tuple)) and not (
            v and all(isinstance(x, (int, float, bool)) for x in v)
        ):
            return all(walk(x) for x in v)
        try:
            out.append(np.asarray(to_numpy_tree(v), dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            return False
        return True

    if not walk(value):
        return None
    return np.concatenate(out) if out else np.zeros(0)


def probe_hidden_state(route: LocalRoute, observation_space: Any) -> None:
    """MOD-37: refuse a vector route whose model keeps hidden state between forwards.

    One model object answers every lane, so state carried from one ``predict`` to the
    next would interleave across lanes. Once per vector route: predict a sampled input
    ``a`` (warm-up), then twice more back to back (the model's own noise floor), then
    a different input ``b``, then ``a`` again; if ``a``'s output drifted by more than
    ``max(noise * 8, 1e-6)``, the route fails. Inconclusive probes pass: a corner that
    takes an episode context or a model that authors a batched corner (its state is
    explicit), spaces that cannot be sampled,
    forwards that raise on sampled inputs, non-numeric outputs, or two samples that
    the adapter maps to the same input.

    Raises:
        ValueError: the model's output for a replayed input depends on the inputs in between.
    """
    if route.wants_ctx or observation_space is None:
        return
    cs = route.corners
    if {"predict_batch", "predict_chunk_batch"} & set(cs.defined):
        return  # a batched corner sees every lane at once: its state is the author's explicit design
    if route.spec_less and route.horizon == 1 and cs.predict_batch is None:
        return  # DELTA-49: a spec-less predict-only model receives the whole batch in one call
    try:
        space = space_from_spec(as_spec(observation_space, "observation_space"), bridge=NUMPY)
        space.seed(0)
        raw_a, raw_b = space.sample(), space.sample()
    except Exception:
        return

    def forward(raw: Any) -> np.ndarray[Any, Any] | None:
        x = route.model_input(raw, 0)
        y = cs.predict_chunk(x, route.horizon, None) if route.chunk_mode else cs.predict(x, None)  # type: ignore[misc]
        return _numeric_leaves(y)

    try:
        forward(raw_a)  # warm: whatever the model remembers is now about ``a``
        first, again = forward(raw_a), forward(raw_a)
        other = forward(raw_b)
        replay = forward(raw_a)
    except Exception:
        return
    finally:
        for adapter in route.adapters:  # the probe's frames never reach an episode
            if adapter is not None:
                adapter.reset()
    if (
        first is None
        or again is None
        or replay is None
        or other is None
        or first.shape != replay.shape
    ):
        return
    if (
        first.shape == other.shape
        and np.array_equal(first, other)
        and np.array_equal(first, replay)
    ):
        return  # the inputs did not tell the model anything different
    noise = (
        float(np.max(np.abs(first - again))) if first.size and first.shape == again.shape else 0.0
    )
    drift = float(np.max(np.abs(replay - again))) if replay.size else 0.0
    if drift > max(noise * _PROBE_NOISE_FACTOR, _PROBE_ATOL):
        name = type(route.model).__name__
        raise ValueError(
            f"{name} keeps hidden state between predict calls (MOD-37): replaying an input after a "
            f"different one changed its output by {drift:.3g} (its own back-to-back noise is {noise:.3g}). "
            "A vector route shares one model object across lanes, so that state would interleave -- keep "
            "per-episode state in the episode context (predict(obs, ctx)) or run with num_envs=1"
        )


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


class LocalRoute:
    """A local model bound to one env (EVAL-13): adapter, bridge, context, chunk replay."""

    def __init__(
        self,
        model: ModelBase[Any, Any],
        *,
        instruction: str | None,
        trust_entrypoints: bool | None,
        execution_horizon: int,
        prefetch_lead: int = 0,
        adapt: bool = True,
    ) -> None:
        self.model = model
        #: False: the model sees observations as they come, whatever its spec (a server of
        #: another wire, whose clients send the model's own payload).
        self.adapt = adapt
        #: DELTA-40: predict the next chunk in the background while at most this many
        #: replay frames remain (0: every forward runs in line with the env step).
        self.prefetch_lead = prefetch_lead
        self._pending: Future[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.instruction = instruction
        self.trust = (
            model._trust_entrypoints if trust_entrypoints is None else bool(trust_entrypoints)
        )
        self.requested_horizon = execution_horizon
        cs = model._corners
        self.corners = cs
        self.bridge = model._bridge
        self.horizon = execution_horizon if cs.has_chunk else 1
        self.store = EpisodeStore()
        self.queue: deque[Any] = deque()  # lane 0's replay queue (a single env's)
        self.queues: list[deque[Any]] = [self.queue]
        self.lane_episode: list[str] = [""]
        self.single_action_space: Any = None
        self.adapter: Any = None
        self.spec_less = True
        self.placements: list[tuple[tuple[Any, ...], bool]] = []
        self.cast: Callable[[Any], Any] | None = None
        self.native_chunk: int | None = None
        self.episode_id = ""
        self.chunk_pos = 0
        self.chunk_len = 0
        self._warned_short = False
        self.env_plain = False
        #: The env's observations are canonical already (a remote env): they may carry
        #: Tensor leaves, looked for on the first observation of an episode.
        self.env_canonical = False
        self._probe_plain = False
        self.identity_decode = self.bridge.name == "numpy"
        #: The env observation as its space's canonical tree (what a served model receives),
        #: so every path hands the model the same values (issue 10 item 3); None: no space.
        self.canonical: Callable[[Any], Any] | None = None

    # -- binding -------------------------------------------------------------------------

    def advisories(self) -> tuple[Any, ...]:
        """The adapter's advisories (``()`` without an adapter or when they cannot be read)."""
        adapter = self.adapter
        if adapter is None:
            return ()
        adv = getattr(adapter, "advisories", ())
        try:
            return tuple(adv() if callable(adv) else adv)
        except Exception:
            return ()

    def bind(self, conn: Any, *, lanes: int = 1) -> None:
        """Resolve the adapter(s) and fix the per-step pipeline (EVAL-10).

        ``conn`` is the opened env side (or a server's bound contract): its
        ``contract``, and ``canonical`` -- an env side whose observations already
        are canonical trees (a remote env decodes them from the wire) is not
        canonicalised a second time.
        """
        model = self.model
        self.env_canonical = bool(getattr(conn, "canonical", False))
        self.canonical = (
            None
            if self.env_canonical
            else observation_plan(getattr(conn.contract, "observation_space", None))
        )
        self.single_action_space = getattr(conn, "single_action_space", None)
        self.queues = [self.queue] + [deque() for _ in range(lanes - 1)]
        self.lane_episode = [""] * lanes
        spec = model._spec if self.adapt else NO_ADAPTER
        self.adapter = resolve_adapter(spec, conn.contract, trust_entrypoints=self.trust)
        self.adapters = (
            [self.adapter]
            + [
                resolve_adapter(spec, conn.contract, trust_entrypoints=self.trust)
                for _ in range(lanes - 1)
            ]
            if self.adapter is not None
            else [None] * lanes
        )
        model._on_bind(conn.contract, instruction=self.instruction, lanes=lanes)
        self.spec_less = self.adapter is None
        if self.prefetch_lead and lanes > 1:
            raise ValueError(
                f"prefetch_lead={self.prefetch_lead} overlaps one env's steps with the next chunk's forward; "
                f"this env has {lanes} lanes (a vector env) -- pass prefetch_lead=0"
            )
        check_history_budget(self.adapter, lanes)
        if self.adapter is not None:
            if self.instruction is not None:
                self.placements = text_placements(model._spec)
            self.cast = box_caster(getattr(conn.contract, "action_space", None))
        k = getattr(model, "native_chunk", None)
        if k is not None:
            if not isinstance(k, int) or k < 1:
                raise ValueError(
                    f"{type(model).__name__}.native_chunk must be an int >= 1, got {k!r}"
                )
            if self.requested_horizon > k:
                raise ValueError(
                    f"execution_horizon={self.requested_horizon} exceeds the model's declared "
                    f"native_chunk={k}; pass execution_horizon <= {k}"
                )
            self.native_chunk = k
        cs = self.corners
        # The chunk path runs at h > 1, and at h == 1 when predict itself is frame 0 of a
        # chunk corner and K is declared (DELTA-34 checks chunk lengths at every horizon).
        self.chunk_mode = self.horizon > 1 or (k is not None and "predict" in cs.dechunked)
        self.wants_ctx = cs.wants_context.get(
            "predict_chunk" if self.chunk_mode else "predict", False
        )
        #: Whether any corner takes a context (then episodes are registered in the store).
        self.any_ctx = any(cs.wants_context.values())
        if lanes > 1:  # MOD-37: one model object serves every lane
            probe_hidden_state(self, getattr(conn.contract, "observation_space", None))

    def cs_wants(self, chunked: bool, batched: bool) -> bool:
        """Whether the corner the vector driver calls declares a context."""
        if chunked:
            name = "predict_chunk_batch" if batched else "predict_chunk"
        else:
            name = "predict_batch" if batched else "predict"
        return self.corners.wants_context.get(name, False)

    # -- episodes ------------------------------------------------------------------------

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        """Lane ``lane`` starts an episode: no replay bleed, fresh frame windows, a context entry."""
        if lane == 0:
            self.episode_id = episode_id
            self._discard_prefetch()  # DELTA-40: a chunk prefetched across an episode boundary is thrown away
            self.chunk_pos = self.chunk_len = 0
            self._probe_plain = self.env_canonical
        self.lane_episode[lane] = episode_id
        self.queues[lane].clear()  # EVAL-50: no replay bleed across episodes
        if self.any_ctx:
            self.store.begin(episode_id, seed)
        adapter = self.adapters[lane]
        if adapter is not None:
            adapter.reset()

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        """The end edge: drop the context entry, then the model's hook (DELTA-30)."""
        self.store.end(episode_id)
        self.model._fire_episode_end(episode_id)

    def close(self) -> None:
        self._discard_prefetch()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.store.clear()
        for queue in self.queues:
            queue.clear()

    # -- asynchronous prefetch (DELTA-40) --------------------------------------------------

    def _discard_prefetch(self) -> None:
        """Wait for an in-flight forward (one forward at a time) and drop its chunk."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception:
                pass  # its chunk is thrown away, and so is its failure

    def _forward(self, x: Any, ctx: Any) -> Any:
        cs = self.corners
        try:
            if self.chunk_mode:
                return cs.predict_chunk(x, self.horizon, ctx)  # type: ignore[misc]
            return cs.predict(x, ctx)  # type: ignore[misc]
        except Exception as exc:
            _annotate(exc, self.spec_less, x)
            raise

    def _prefetch(self, observation: Any) -> None:
        """Start the next chunk's forward on this (up to ``prefetch_lead`` steps stale) observation."""
        x = self.model_input(observation)
        ctx = self.store.next(self.episode_id) if self.wants_ctx else None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlmesh-prefetch")
        self._pending = self._pool.submit(self._forward, x, ctx)

    # -- per step ------------------------------------------------------------------------

    def model_input(self, observation: Any, lane: int = 0) -> Any:
        """Env observation -> the value the corner sees."""
        x = observation if self.canonical is None else self.canonical(observation)
        adapter = self.adapters[lane]
        if adapter is not None:
            x = adapter.transform_obs(x)
        if self.env_plain:
            x = to_numpy_tree(x)
        if not self.identity_decode:
            x = self.bridge.decode(x)
        if self.placements:
            for path, as_list in self.placements:
                x = inject(x, path, [self.instruction] if as_list else self.instruction)
        return x

    def env_action(self, frame: Any, lane: int = 0) -> Any:
        """One model action frame -> the env-ready action."""
        a = frame if self.identity_decode else self.bridge.encode(frame)
        adapter = self.adapters[lane]
        if adapter is not None:
            a = adapter.transform_action(a)
            if self.cast is not None:
                a = self.cast(a)
        return a

    def chunk_frames(self, chunk: Any) -> list[Any]:
        """Split one chunk, validate its length and cap it to the horizon (EVAL-50, DELTA-34)."""
        frames = split_chunk(chunk)
        k = self.native_chunk
        if not frames:
            raise ValueError("the model returned an empty chunk; a chunk needs at least one frame")
        if k is not None and len(frames) != k:
            raise ValueError(
                f"model declares native_chunk={k} but its chunk corner returned {len(frames)} "
                f"frames; return exactly {k} frames or fix native_chunk"
            )
        if k is None and len(frames) < self.horizon and not self._warned_short:
            self._warned_short = True
            warnings.warn(
                f"the model's chunk has {len(frames)} frames, fewer than execution_horizon="
                f"{self.horizon}; replaying what it returned and re-planning early",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
        return frames[: self.horizon]

    def predict_frames(self, observation: Any) -> list[Any]:
        """One forward on lane 0, all of it: the chunk's env-ready frames (one for a non-chunk model).

        No replay queue is touched: a server of another wire (``rlmesh.openpi``) sends the
        whole chunk and its client replays it.
        """
        x = self.model_input(observation)
        ctx = self.store.next(self.episode_id) if self.wants_ctx else None
        out = self._forward(x, ctx)
        frames = self.chunk_frames(out) if self.chunk_mode else [out]
        return [self.env_action(f) for f in frames]

    def predict(self, observation: Any) -> Any:
        """One env observation -> one env-ready action, replaying queued chunk frames first."""
        if self._probe_plain:  # a remote env's first observation of the episode
            self._probe_plain = False
            self.env_plain = has_tensor_leaf(observation)
        if self.queue:
            self.chunk_pos += 1
            if (
                self.prefetch_lead
                and self._pending is None
                and len(self.queue) <= self.prefetch_lead
            ):
                self._prefetch(
                    observation
                )  # the adapter sees this step's frame through model_input
            else:
                adapter = self.adapter
                if adapter is not None:  # DELTA-69: frame windows see every step, not only re-plans
                    adapter.observe(observation)
            return self.env_action(self.queue.popleft())
        pending, self._pending = self._pending, None
        if pending is not None:
            adapter = self.adapter
            if adapter is not None:  # this step made no model input of its own
                adapter.observe(observation)
            out = pending.result()  # raises the forward's own (annotated) exception
        else:
            x = self.model_input(observation)
            ctx = self.store.next(self.episode_id) if self.wants_ctx else None
            out = self._forward(x, ctx)
        if self.chunk_mode:
            frames = self.chunk_frames(out)
            self.queue.extend(frames[1:])
            self.chunk_pos, self.chunk_len = 1, len(frames)
            out = frames[0]
        return self.env_action(out)

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        """One batched env action for all lanes (EVAL-61..63, MOD-35).

        Lanes that need a model forward this step (not rolling, nothing queued) are
        fused into one call of the batched corner when the model has one (EVAL-69),
        else the model is called per lane; a lane with queued chunk frames replays
        the next one; a rolling lane repeats its last action (the env ignores it).
        """
        n = len(last_action)
        if self._probe_plain:
            self._probe_plain = False
            self.env_plain = has_tensor_leaf(observation)
        cs = self.corners
        bridge = self.bridge
        h = self.horizon
        queues = self.queues
        need = [i for i in range(n) if not rolling[i] and not queues[i]]
        chunked = h > 1
        batched = (cs.predict_chunk_batch if chunked else None) or (
            None if chunked and cs.predict_chunk else cs.predict_batch
        )
        per_lane_actions: list[Any] = [None] * n
        if batched is None and not chunked and self.spec_less:
            # Spec-less predict-only route: the whole batch goes to predict (DELTA-49).
            x = (
                observation
                if self.identity_decode and not self.env_plain
                else bridge.decode(to_numpy_tree(observation))
            )
            ctx = self.store.next("") if self.wants_ctx else None
            out = cs.predict(x, ctx)  # type: ignore[misc]
            try:
                lanes_out = bridge.tree_unstack(out, n)
            except (ValueError, TypeError):
                raise TypeError(
                    f"predict received a batch of {n} observations from a vector env and must return "
                    f"{n} actions (a leading lane axis); define predict_batch for batched inference, "
                    "or serve the env as lanes"
                ) from None
            for lane in range(n):
                last_action[lane] = lanes_out[lane]
            return bridge.encode(out) if not self.identity_decode else out
        obs_np = to_numpy_tree(observation) if self.env_plain else observation
        if need:
            inputs: list[Any] = []
            if batched is not None and len(need) == n and self.spec_less and self.identity_decode:
                inputs_batch = obs_np  # fast path: the env's batch is the model's batch (EVAL-63)
            else:
                per_obs = _NP.tree_unstack(obs_np, n)
                inputs = [self.model_input(per_obs[i], i) for i in need]
                inputs_batch = bridge.tree_stack(inputs) if batched is not None else None
            eids = self.lane_episode
            if batched is not None:
                ctxs = (
                    [self.store.next(eids[i]) for i in need]
                    if self.cs_wants(chunked, True)
                    else None
                )
                fused: Any = batched
                out = fused(inputs_batch, h, ctxs) if chunked else fused(inputs_batch, ctxs)
                outs = bridge.tree_unstack(out, len(need))
            else:
                outs = []
                for j, i in enumerate(need):
                    ctx = self.store.next(eids[i]) if self.cs_wants(chunked, False) else None
                    fn: Any = cs.predict_chunk if chunked else cs.predict
                    outs.append(fn(inputs[j], h, ctx) if chunked else fn(inputs[j], ctx))
            for j, i in enumerate(need):
                if chunked:
                    frames = self.chunk_frames(outs[j])
                    queues[i].extend(frames[1:])
                    per_lane_actions[i] = self.env_action(frames[0], i)
                else:
                    per_lane_actions[i] = self.env_action(outs[j], i)
        replay_obs: list[Any] | None = None
        for i in range(n):
            if per_lane_actions[i] is None:
                if queues[i] and not rolling[i]:
                    adapter = self.adapters[i]
                    if adapter is not None:  # DELTA-69: keep frame windows consecutive
                        if replay_obs is None:
                            replay_obs = _NP.tree_unstack(obs_np, n)
                        adapter.observe(replay_obs[i])
                    per_lane_actions[i] = self.env_action(queues[i].popleft(), i)
                else:  # a rolling lane: the env ignores its action
                    per_lane_actions[i] = last_action[i]
                    if per_lane_actions[i] is None:
                        per_lane_actions[i] = self.single_action_space.sample()
            last_action[i] = per_lane_actions[i]
        return _NP.tree_stack(per_lane_actions)
