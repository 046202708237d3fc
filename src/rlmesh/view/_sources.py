"""Frame sources of a run and frame normalisation, shared by the viewer and the recorder (VIEW-3..7).

Stable API (the recorder imports these; keep the names and signatures):

``discover_sources(context, *, leaves=True) -> tuple[FrameSource, ...]``
    Every camera of a bound run, in display order (VIEW-3): the env's ``render()``
    frame first when its ``render_mode`` contains ``"rgb"`` (label ``"render"``, or
    ``"render()"`` when an image role is itself named ``"render"``), then the image
    roles the env declares in its tags (declaration order, custom roles included).
    When the env declares no image role at all, image-like observation leaves
    (``uint8`` ``HxWxC``/``CxHxW``/``HxW`` boxes, see :func:`image_leaves`) stand in
    for roles, labelled by their path (``"pixels"``, ``"cams/front"``; a bare image
    observation is ``"observation"``). ``leaves=False`` turns that fallback off.
    ``context`` is a :class:`rlmesh.Session` (anything with ``contract`` and
    ``read(observation, item)``; the env for ``render`` is taken from the session's
    connection, or from ``env=``).

``FrameSource(label, kind, key, fetch, fetch_all=None)``
    ``kind`` is ``"render"``, ``"role"`` or ``"leaf"``; ``fetch(observation, lane)``
    returns the raw frame (any array-like, or ``None``) for lane ``lane`` of the
    observation the env just returned (``lane`` is 0 for a single env; the
    observation is the batched one for a vector env). Fetching may raise; callers
    treat that as "no frame this time".

``source_labels(image_roles, render_mode) -> tuple[str, ...]``
    The pure labelling rule of VIEW-3 (what ``Session.frame_sources()`` returns).

``render_thunk(env) -> Callable[[int], Any] | None``
    ``render`` resolved once by signature (VIEW-5): ``render(env_index=lane)`` when
    the method takes ``env_index`` or ``**kwargs`` (remote clients), else
    ``render()`` (a gymnasium vector env's tuple of frames is indexed by lane; lane
    ``-1`` returns ``render()``'s value as is); ``None`` when the env has no ``render``.
    On a vector env with a plain ``render()``, the source's ``fetch_all`` renders
    every lane with one call.

``normalize_frame(x) -> numpy.ndarray | None``
    Any frame to a C-contiguous ``HxWx3`` ``uint8`` RGB array (VIEW-7), or ``None``
    when ``x`` is not an image. Accepts numpy arrays, rlmesh ``Tensor``, torch and
    jax arrays, lists. ``HxW`` and ``HxWx1`` grayscale are replicated to RGB, alpha
    is dropped, ``CxHxW`` (C in 1/3/4, last axis not a channel count) is transposed.
    Non-``uint8`` values: ``[0, 1]`` -> ``x*255``; ``[-1, 1]`` -> ``(x+1)*127.5``;
    otherwise outside ``[0, 255]`` -> min-max stretched (a flat frame -> ``x-min``);
    then clipped and cast. A ``uint8`` HWC RGB input is returned as is (no copy).

``select_index(labels, wanted) -> int``
    The initial selection (VIEW-4): index of ``wanted`` in ``labels``, else 0.

``lane_slice(observation, lane) -> observation``
    Lane ``lane`` of a batched (vector) observation: arrays indexed on the first
    axis, dicts/tuples/lists walked.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._keys import ENV_TAGS_KEY
from ..adapters import Image, observation_roles

__all__ = [
    "FrameSource",
    "context_env",
    "discover_sources",
    "has_rgb_render",
    "image_leaves",
    "lane_slice",
    "normalize_frame",
    "register_render_target",
    "render_thunk",
    "select_index",
    "source_labels",
]

#: Smallest side of an observation leaf taken for an image (smaller uint8 boxes are features).
MIN_LEAF_SIDE = 8

_TAGS_KEY = ENV_TAGS_KEY


@dataclass(frozen=True)
class FrameSource:
    """One camera of a run (VIEW-3).

    Attributes:
        label: What the user sees and selects (``View.source``; the recorder's camera name).
        kind: ``"render"`` (the env's ``render()``), ``"role"`` (a declared image role)
            or ``"leaf"`` (an image-like observation leaf of an untagged env).
        key: The role name, the leaf path joined by ``/``, or ``"render"``.
        fetch: ``fetch(observation, lane)`` -> the raw frame (or ``None``).
        fetch_all: ``fetch_all(observation)`` -> every lane's raw frame in one call, when
            the source can do better than one ``fetch`` per lane (a vector env's plain
            ``render()``); ``None`` otherwise.
    """

    label: str
    kind: str
    key: str
    fetch: Callable[[Any, int], Any]
    fetch_all: Callable[[Any], Sequence[Any]] | None = None


# -- labels -----------------------------------------------------------------------------------


def has_rgb_render(render_mode: object) -> bool:
    """Whether a ``render_mode`` yields RGB frames (contains ``"rgb"``, any case; VIEW-3).

    >>> has_rgb_render("rgb_array"), has_rgb_render("RGB"), has_rgb_render("human"), has_rgb_render(None)
    (True, True, False, False)
    """
    return isinstance(render_mode, str) and "rgb" in render_mode.lower()


def source_labels(image_roles: Sequence[str], render_mode: object) -> tuple[str, ...]:
    """The viewer's source labels: render first, then the declared image roles (VIEW-3).

    >>> source_labels(["image/primary", "wrist"], "rgb_array")
    ('render', 'image/primary', 'wrist')
    >>> source_labels(["render"], "rgb_array"), source_labels(["a"], None)
    (('render()', 'render'), ('a',))
    """
    roles = tuple(str(r) for r in image_roles)
    if has_rgb_render(render_mode):
        return ("render()" if "render" in roles else "render", *roles)
    return roles


def select_index(labels: Sequence[str], wanted: str | None) -> int:
    """Initial selection: the index of ``wanted`` in ``labels``, else 0 (VIEW-4).

    >>> select_index(["render", "wrist"], "wrist"), select_index(["render"], "nope"), select_index([], None)
    (1, 0, 0)
    """
    if wanted is not None:
        for i, label in enumerate(labels):
            if label == wanted:
                return i
    return 0


# -- render -----------------------------------------------------------------------------------


def render_thunk(env: Any) -> Callable[[int], Any] | None:
    """Resolve ``env.render`` once by signature (VIEW-5); ``None`` when there is none.

    The thunk takes the lane: ``render(env_index=lane)`` for a method with an
    ``env_index`` parameter or ``**kwargs``; otherwise ``render()``, indexed by lane
    when it returns a per-lane tuple/list (gymnasium vector envs).
    """
    render = getattr(env, "render", None) if env is not None else None
    if not callable(render):
        return None
    by_index = False
    try:
        params = inspect.signature(render).parameters.values()
        by_index = any(
            p.name == "env_index" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
        )
    except (TypeError, ValueError):
        by_index = False
    if by_index:

        def indexed(lane: int) -> Any:
            return render(env_index=lane)

        indexed.per_lane = True  # type: ignore[attr-defined]
        return indexed

    def plain(lane: int) -> Any:
        frame = render()
        if lane < 0:  # every lane at once (the caller indexes)
            return frame
        if isinstance(frame, (tuple, list)) and frame and not isinstance(frame[0], (int, float)):
            return frame[lane] if lane < len(frame) else None
        return frame

    return plain


# -- observation leaves -----------------------------------------------------------------------


def _space_parts(space: Any) -> tuple[str, Any, Any, Any]:
    """``(kind, children, shape, dtype)`` of a SpaceSpec, an rlmesh space or a gymnasium space."""
    spec = getattr(space, "spec", None)
    if spec is not None and hasattr(spec, "_details") and hasattr(spec, "kind"):
        space = spec
    if hasattr(space, "_details") and hasattr(space, "kind"):  # rlmesh SpaceSpec
        kind = space.kind
        if kind in ("dict", "tuple"):
            return kind, space._details()["spaces"], None, None
        return kind, None, tuple(space.shape), str(space.dtype)
    children = getattr(space, "spaces", None)
    if isinstance(children, Mapping):
        return "dict", children, None, None
    if isinstance(children, (tuple, list)):
        return "tuple", children, None, None
    shape = getattr(space, "shape", None)
    dtype = getattr(space, "dtype", None)
    return (
        "box",
        None,
        tuple(shape) if shape is not None else None,
        str(np.dtype(dtype)) if dtype is not None else None,
    )


def _image_shape(shape: tuple[int, ...] | None, dtype: str | None) -> bool:
    if dtype != "uint8" or shape is None:
        return False
    if len(shape) == 2:
        return min(shape) >= MIN_LEAF_SIDE
    if len(shape) == 3:
        if shape[2] in (1, 3, 4):
            return min(shape[0], shape[1]) >= MIN_LEAF_SIDE
        if shape[0] in (1, 3, 4):
            return min(shape[1], shape[2]) >= MIN_LEAF_SIDE
    return False


def image_leaves(space: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Paths and labels of image-like leaves of an observation space (uint8 HxWxC / CxHxW / HxW).

    >>> from rlmesh.spaces import Box, Dict
    >>> image_leaves(Dict({"pixels": Box(0, 255, (64, 64, 3), "uint8"), "pos": Box(-1, 1, (3,))}))
    [(('pixels',), 'pixels')]
    >>> image_leaves(Box(0, 255, (84, 84), "uint8"))
    [((), 'observation')]
    """
    out: list[tuple[tuple[Any, ...], str]] = []

    def walk(node: Any, path: tuple[Any, ...], depth: int) -> None:
        if depth > 8 or node is None:
            return
        try:
            kind, children, shape, dtype = _space_parts(node)
        except Exception:
            return
        if kind == "dict":
            for key, child in children.items():
                walk(child, (*path, key), depth + 1)
        elif kind == "tuple":
            for i, child in enumerate(children):
                walk(child, (*path, i), depth + 1)
        elif _image_shape(shape, dtype):
            out.append((path, "/".join(str(p) for p in path) or "observation"))

    walk(space, (), 0)
    return out


def _get_path(obs: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def lane_slice(observation: Any, lane: int) -> Any:
    """Lane ``lane`` of a batched observation (first axis of every array leaf).

    >>> lane_slice({"a": np.arange(6).reshape(3, 2)}, 1)["a"].tolist()
    [2, 3]
    """
    if isinstance(observation, Mapping):
        return {k: lane_slice(v, lane) for k, v in observation.items()}
    if isinstance(observation, list):
        return [lane_slice(v, lane) for v in observation]
    if isinstance(observation, tuple):
        return tuple(lane_slice(v, lane) for v in observation)
    if isinstance(observation, (str, bytes)) or observation is None:
        return observation
    try:
        return observation[lane]
    except Exception:
        return np.asarray(observation)[lane]


# -- discovery --------------------------------------------------------------------------------


def _declared_image_roles(contract: Any) -> tuple[str, ...]:
    metadata = getattr(contract, "metadata", None)
    if not isinstance(metadata, Mapping) or metadata.get(_TAGS_KEY) is None:
        return ()
    try:
        return tuple(observation_roles(metadata).images)
    except Exception:
        return ()


#: How to find the env behind a run's context (the drive registers one for its sessions):
#: the viewer asks these instead of reaching into the context.
_RENDER_TARGETS: list[Callable[[Any], Any]] = []


def register_render_target(resolver: Callable[[Any], Any]) -> None:
    """Register ``resolver(context) -> env | None``: the object whose ``render()`` shows ``context``'s env."""
    if resolver not in _RENDER_TARGETS:
        _RENDER_TARGETS.append(resolver)


def context_env(context: Any) -> Any:
    """The env whose ``render()`` shows a run's ``context`` (a session), or ``None``."""
    for resolve in _RENDER_TARGETS:
        try:
            env = resolve(context)
        except Exception:
            env = None
        if env is not None:
            return env
    return None


def _num_envs(context: Any) -> int:
    try:
        n = int(getattr(context, "num_envs", 1))
    except Exception:
        return 1
    return max(1, n)


def discover_sources(
    context: Any, *, env: Any = None, leaves: bool = True
) -> tuple[FrameSource, ...]:
    """Every camera of a bound run, render first (VIEW-3; see the module docstring).

    ``context`` is a :class:`rlmesh.Session` or any object with ``contract``,
    ``num_envs`` and ``read(observation, item)``; ``env`` (the object whose ``render``
    to call) defaults to the session's connected env. Returns ``()`` when the env
    has no camera.
    """
    contract = getattr(context, "contract", None)
    roles = _declared_image_roles(contract)
    render_mode = getattr(contract, "render_mode", None)
    vector = _num_envs(context) > 1
    out: list[FrameSource] = []
    if has_rgb_render(render_mode):
        thunk = render_thunk(env if env is not None else context_env(context))
        if thunk is not None:
            label = source_labels(roles, render_mode)[0]
            render_fn = thunk

            def fetch_render(_obs: Any, lane: int) -> Any:
                return render_fn(lane)

            fetch_all = None
            if vector and not getattr(thunk, "per_lane", False):

                def fetch_all(_obs: Any) -> Any:  # one render() call for every lane
                    frames = render_fn(-1)
                    if (
                        isinstance(frames, (tuple, list))
                        and frames
                        and not isinstance(frames[0], (int, float))
                    ):
                        return list(frames)
                    return [frames]

            out.append(FrameSource(label, "render", "render", fetch_render, fetch_all))
    if roles:
        read = context.read
        for role in roles:
            item = Image(role, layout="hwc")

            def fetch_role(obs: Any, lane: int, _item: Any = item) -> Any:
                return read(lane_slice(obs, lane) if vector else obs, _item)

            out.append(FrameSource(role, "role", role, fetch_role))
    elif leaves:
        space = getattr(contract, "observation_space", None)
        for path, label in image_leaves(space):

            def fetch_leaf(obs: Any, lane: int, _path: tuple[Any, ...] = path) -> Any:
                leaf = _get_path(obs, _path)
                return lane_slice(leaf, lane) if vector else leaf

            out.append(FrameSource(label, "leaf", label, fetch_leaf))
    return tuple(out)


# -- normalisation ----------------------------------------------------------------------------


def _to_numpy(x: Any) -> np.ndarray[Any, Any] | None:
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x
    detach = getattr(x, "detach", None)  # torch
    if callable(detach):
        try:
            return np.asarray(detach().cpu().numpy())
        except Exception:
            return None
    try:
        return np.asarray(x)
    except Exception:
        return None


def normalize_frame(x: Any) -> np.ndarray[Any, Any] | None:
    """Any frame -> C-contiguous ``HxWx3`` ``uint8`` RGB, or ``None`` when not an image (VIEW-7).

    >>> normalize_frame(np.zeros((4, 5), np.uint8)).shape
    (4, 5, 3)
    >>> normalize_frame(np.ones((3, 4, 5), np.float32)).shape, int(normalize_frame(np.ones((2, 2, 3)))[0, 0, 0])
    ((4, 5, 3), 255)
    >>> normalize_frame(np.zeros(7)) is None
    True
    """
    a = _to_numpy(x)
    if a is None or a.dtype == object or a.size == 0:
        return None
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3:
        return None
    if a.shape[2] not in (1, 3, 4) and a.shape[0] in (1, 3, 4):
        a = a.transpose(1, 2, 0)  # CHW -> HWC
    c = a.shape[2]
    if c not in (1, 3, 4):
        return None
    if a.dtype != np.uint8:
        if a.dtype == np.bool_:
            a = a.astype(np.uint8) * 255
        else:
            f = a.astype(np.float32, copy=False)
            lo, hi = float(f.min()), float(f.max())
            if not (np.isfinite(lo) and np.isfinite(hi)):
                f = np.nan_to_num(f, nan=0.0, posinf=255.0, neginf=0.0)
                lo, hi = float(f.min()), float(f.max())
            if lo >= 0.0 and hi <= 1.0:
                f = f * 255.0
            elif lo >= -1.0 and hi <= 1.0:
                f = (f + 1.0) * 127.5
            elif lo < 0.0 or hi > 255.0:
                span = hi - lo
                f = (f - lo) * (255.0 / span) if span > 1e-12 else f - lo
            a = np.clip(f, 0.0, 255.0).astype(np.uint8)
    if c == 1:
        a = np.repeat(a, 3, axis=2)
    elif c == 4:
        a = a[:, :, :3]
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a
