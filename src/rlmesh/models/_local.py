"""``LocalRoute``: a local model bound to one env (EVAL-13, EVAL-50/51, DELTA-40/48).

Bound once against the opened env (adapter resolution, instruction placements,
effective horizon: the stages in :mod:`rlmesh.models._pipeline`), the route then
runs per step, in order: the canonical observation, the adapter's observation
transform, the model bridge, the instruction, the corner (with its context if
declared), then -- per frame of a chunk -- the bridge back, the adapter's action
transform and the cast to the env's Box dtype/shape. A chunk's frames are replayed
one per step (its queue per lane), and with ``prefetch_lead`` the next chunk's
forward runs in the background while the last frames replay.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..tensor import Tensor
from ._base import ModelBase
from ._context import EpisodeStore
from ._pipeline import (
    annotate,
    box_caster,
    check_history_budget,
    inject,
    observation_plan,
    resolve_adapter,
    text_placements,
)
from ._probe import probe_hidden_state
from ._sentinels import NO_ADAPTER
from ._values import get_bridge, split_chunk, to_numpy_tree
from ._warn import user_stacklevel

__all__ = ["LocalRoute", "has_tensor_leaf"]

_NP = get_bridge("numpy")


def has_tensor_leaf(tree: Any) -> bool:
    """Whether a value tree holds a :class:`~rlmesh.Tensor` leaf (a dtype numpy cannot hold)."""
    if isinstance(tree, Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(has_tensor_leaf(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(has_tensor_leaf(v) for v in tree)
    return False


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
            annotate(exc, self.spec_less, x)
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
