"""The observation map: which env values an openpi server receives under which keys.

An openpi server expects a flat dict keyed by its own names (``"observation/image"``,
``"observation/state"``, ``"prompt"``); an rlmesh env publishes an observation tree
and, when tagged, roles. ``obs_map`` pairs them, one entry per server key:

- ``"path"``: an observation path (``"image"``, ``"agent/eef_pos"``, a Tuple index as
  ``"0"``; ``""`` is the whole observation), or else a role the env's adapter tags
  declare (``"image/primary"``, ``"proprio/eef_pos"``), read in the env's own encoding;
- :class:`Image` ``(source, size=, dtype=)``: an image from a path or a role, resized
  with the adapters' kernels and cast;
- :class:`State` ``(*sources, dtype=)``: one or more paths or roles, flattened and
  concatenated;
- an adapters leaf (``rlmesh.adapters.Image(IMAGE_PRIMARY, size=224)``, ``State``,
  ``Text``, a one-role ``Concat``): read by role through the adapters, with every
  conversion it declares.

A literal top-level key wins over a ``/``-split path, a path over a role. The map is
checked against the env's contract when a session binds (a key that names nothing
raises :class:`~rlmesh.errors.AdapterResolutionError` naming it), and each step's value
is checked against what the entry needs (:class:`~rlmesh.errors.ShapeMismatch` naming
the key).

Without ``obs_map`` a Dict observation travels key by key (nested keys joined with
``/``), any other observation as ``"observation/state"``.

>>> Image("pixels", size=224)
Image(source='pixels', size=(224, 224), dtype='uint8', resample='bilinear')
>>> State("eef_pos", "gripper", dtype="float32")
State(sources=('eef_pos', 'gripper'), dtype='float32')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import adapters as _adapters
from ..adapters._ops_image import Resizer, cast_pixels
from ..errors import AdapterResolutionError, ShapeMismatch
from ..spaces import space_from_spec
from ..spaces._gym import as_spec

__all__ = [
    "DEFAULT_STATE_KEY",
    "PROMPT_KEY",
    "Image",
    "ObservationMapper",
    "State",
    "compile_obs_map",
]

#: The key the prompt travels under (openpi's convention).
PROMPT_KEY = "prompt"
#: Where a non-Dict observation travels without an ``obs_map``.
DEFAULT_STATE_KEY = "observation/state"

_RESAMPLE = ("bilinear", "bilinear_aa", "bicubic_aa", "lanczos3_aa", "area")


@dataclass(frozen=True, init=False)
class Image:
    """An image for the server: read ``source``, resize to ``size`` (``(h, w)`` or one int), cast.

    ``source`` is an observation path or a role. The image is ``[H, W, C]`` (a ``[C, H, W]``
    one is transposed); resizing needs ``uint8`` pixels and uses the adapters' kernels
    (``resample``: ``bilinear``, ``bilinear_aa``, ``bicubic_aa``, ``lanczos3_aa``, ``area``).
    """

    source: str
    size: tuple[int, int] | None
    dtype: str
    resample: str

    def __init__(
        self,
        source: str,
        *,
        size: int | tuple[int, int] | None = None,
        dtype: str = "uint8",
        resample: str = "bilinear",
    ) -> None:
        if not isinstance(source, str):
            raise TypeError(
                f"Image source must be a path or role string, got {type(source).__name__}"
            )
        if size is not None:
            pair = (size, size) if isinstance(size, int) else tuple(size)
            if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
                raise ValueError(f"Image size must be an int or (height, width) > 0, got {size!r}")
            size = (int(pair[0]), int(pair[1]))
        if resample not in _RESAMPLE:
            raise ValueError(f"Image resample must be one of {list(_RESAMPLE)}, got {resample!r}")
        np.dtype(dtype)  # a bad dtype name fails here, not at the first step
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "dtype", str(dtype))
        object.__setattr__(self, "resample", resample)


@dataclass(frozen=True, init=False)
class State:
    """A state vector for the server: ``sources`` (paths or roles) flattened, concatenated, cast."""

    sources: tuple[str, ...]
    dtype: str | None

    def __init__(self, *sources: str, dtype: str | None = None) -> None:
        if not sources or not all(isinstance(s, str) for s in sources):
            raise TypeError("State needs one or more path or role strings")
        if dtype is not None:
            np.dtype(dtype)
        object.__setattr__(self, "sources", tuple(sources))
        object.__setattr__(self, "dtype", dtype)


_ADAPTER_LEAVES = (_adapters.Image, _adapters.State, _adapters.Text, _adapters.Concat)
Getter = Callable[[Any, Mapping[str, Any]], Any]


def _space_of(contract: Any) -> Any:
    """The observation space as an rlmesh space (``None``: unknown, paths go unchecked)."""
    raw = getattr(contract, "observation_space", None)
    if raw is None:
        return None
    try:
        return space_from_spec(as_spec(raw, "observation_space"))
    except (TypeError, ValueError):
        return None


def _children(space: Any) -> dict[str, Any] | None:
    """``{key: subspace}`` of a Dict or Tuple space (``None`` for a leaf)."""
    kind = getattr(space, "kind", None)
    if kind == "dict":
        return {str(k): v for k, v in space.spaces.items()}
    if kind == "tuple":
        return {str(i): v for i, v in enumerate(space.spaces)}
    return None


def _paths(space: Any, prefix: str = "") -> list[str]:
    kids = _children(space)
    if kids is None:
        return [prefix]
    out = []
    for k, v in kids.items():
        out.extend(_paths(v, f"{prefix}/{k}" if prefix else k))
    return out


def _walk(space: Any, source: str) -> tuple[tuple[Any, ...], Any] | None:
    """``(steps, subspace)`` for a path in ``space`` (a literal key first), or ``None``."""
    if source == "":
        return (), space
    kids = _children(space)
    if kids is None:
        return None
    if source in kids:
        return (_step(space, source),), kids[source]
    head, sep, rest = source.partition("/")
    if not sep or head not in kids:
        return None
    found = _walk(kids[head], rest)
    if found is None:
        return None
    return (_step(space, head), *found[0]), found[1]


def _step(space: Any, key: str) -> Any:
    return int(key) if getattr(space, "kind", None) == "tuple" else key


def _getter(steps: tuple[Any, ...], key: str, source: str) -> Getter:
    def get(obs: Any, roles: Mapping[str, Any]) -> Any:
        value = obs
        for s in steps:
            try:
                value = value[s]
            except (KeyError, IndexError, TypeError):
                raise _missing_step(key, source, s, value) from None
        return value

    return get


def _missing_step(key: str, source: str, step: Any, value: Any) -> ShapeMismatch:
    """An observation with nothing at one step of an obs_map path (the getters' one error)."""
    return ShapeMismatch(
        f"obs_map[{key!r}] reads {source!r}, but this observation has no {step!r} there",
        key=key,
        expected=source,
        actual=type(value).__name__,
    )


def _unchecked_steps(source: str) -> tuple[Any, ...]:
    """A path with no space to check it against: ``/``-split, digits as indices at run time."""
    return () if source == "" else tuple(source.split("/"))


def _loose_getter(source: str, key: str) -> Getter:
    steps = _unchecked_steps(source)

    def get(obs: Any, roles: Mapping[str, Any]) -> Any:
        if isinstance(obs, Mapping) and source in obs:
            return obs[source]
        value = obs
        for s in steps:
            try:
                value = value[int(s)] if isinstance(value, (list, tuple)) else value[s]
            except (KeyError, IndexError, TypeError, ValueError):
                raise _missing_step(key, source, s, value) from None
        return value

    return get


class _Binder:
    """Compiles the entries of one obs_map against one contract."""

    def __init__(self, contract: Any) -> None:
        self.contract = contract
        self.space = _space_of(contract)
        self.role_items: list[Any] = []  # what the one Reader reads (role strings or leaves)
        metadata = getattr(contract, "metadata", None)
        roles = _adapters.observation_roles(metadata if isinstance(metadata, Mapping) else None)
        self.roles = {*roles.images, *roles.states, *roles.texts}

    def source(self, key: str, source: str, *, register: bool = True) -> tuple[Getter, Any]:
        """A getter for ``source`` (path first, then role) and its subspace (``None``: a role).

        ``register=False`` only checks a role (the caller reads it through a leaf of its own).
        """
        found = None if self.space is None else _walk(self.space, source)
        if found is not None:
            return _getter(found[0], key, source), found[1]
        if source in self.roles:
            return (self.role(source) if register else _unread), None
        if self.space is None:
            return _loose_getter(source, key), None
        raise AdapterResolutionError(
            f"obs_map[{key!r}] = {source!r} names no observation path and no role of this env; "
            f"paths: {_paths(self.space)}; roles: {sorted(self.roles) or 'none (the env is untagged)'}",
            code="missing_role",
        )

    def role(self, item: Any) -> Getter:
        name = item if isinstance(item, str) else _leaf_role(item)
        if item not in self.role_items:
            self.role_items.append(item)

        def get(obs: Any, roles: Mapping[str, Any]) -> Any:
            return roles[name]

        return get


def _unread(obs: Any, roles: Mapping[str, Any]) -> Any:
    raise AssertionError("a role checked with register=False is read through its own leaf")


def _leaf_role(leaf: Any) -> str:
    if isinstance(leaf, _adapters.Concat):
        part = leaf.parts[0]
        return part if isinstance(part, str) else str(getattr(part, "role", ""))
    return str(leaf.role)


def _image_getter(key: str, entry: Image, binder: _Binder) -> Getter:
    get, space = binder.source(key, entry.source, register=entry.size is None)
    if space is None and entry.source in binder.roles and entry.size is not None:
        # a role with a size: the adapters resize it (they know its layout from the tags)
        h, w = entry.size
        get = binder.role(
            _adapters.Image(
                entry.source,
                height=h,
                width=w,
                resample=entry.resample,
                allow_upscale=True,
                fit="stretch",  # as a path's image: resized to the size, whatever its aspect
                dtype=entry.dtype,
            )
        )
    elif space is not None:
        shape = tuple(getattr(space, "shape", ()) or ())
        if getattr(space, "kind", None) != "box" or len(shape) not in (2, 3):
            raise AdapterResolutionError(
                f"obs_map[{key!r}] = Image({entry.source!r}) needs an image ([H, W, C]) there; "
                f"the observation space has {space!r}",
                code="dim_mismatch",
            )
    dtype = np.dtype(entry.dtype)
    size = entry.size
    resizers: dict[tuple[int, ...], Resizer] = {}

    def image(obs: Any, roles: Mapping[str, Any]) -> Any:
        img = np.asarray(get(obs, roles))
        if img.ndim == 2:
            img = img[:, :, None]
        elif img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
            img = img.transpose(1, 2, 0)  # CHW -> HWC
        if img.ndim != 3:
            raise ShapeMismatch(
                f"obs_map[{key!r}] expects an image [H, W, C] from {entry.source!r}, got "
                f"{img.dtype}{list(img.shape)}",
                key=key,
                expected="[H, W, C]",
                actual=f"{img.dtype}{list(img.shape)}",
            )
        if size is not None and img.shape[:2] != size:
            if img.dtype != np.uint8:
                raise ShapeMismatch(
                    f"obs_map[{key!r}] resizes {entry.source!r} to {size[0]}x{size[1]}, which needs "
                    f"uint8 pixels; got {img.dtype}{list(img.shape)} (cast it in the env, or drop size=)",
                    key=key,
                    expected="uint8[H, W, C]",
                    actual=f"{img.dtype}{list(img.shape)}",
                )
            resize = resizers.get(img.shape)
            if resize is None:
                resize = resizers[img.shape] = Resizer(
                    img.shape[0],
                    img.shape[1],
                    size[0],
                    size[1],
                    entry.resample,
                    channels=img.shape[2],
                )
            img = resize(img)
        try:
            return cast_pixels(img, dtype, None)
        except ValueError as exc:
            raise ShapeMismatch(
                f"obs_map[{key!r}]: {exc}", key=key, expected=dtype.name, actual=str(img.dtype)
            ) from None

    return image


def _state_getter(key: str, entry: State, binder: _Binder) -> Getter:
    parts = [binder.source(key, s)[0] for s in entry.sources]
    dtype = None if entry.dtype is None else np.dtype(entry.dtype)

    def state(obs: Any, roles: Mapping[str, Any]) -> Any:
        arrays = [np.asarray(p(obs, roles)).reshape(-1) for p in parts]
        out = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        return out if dtype is None else out.astype(dtype, copy=False)

    return state


class ObservationMapper:
    """One env observation -> the openpi observation dict (compiled once per bind)."""

    def __init__(
        self, entries: list[tuple[str, Getter]] | None, reader: Any, prompt: Getter | str | None
    ) -> None:
        self.entries = entries
        self.reader = reader
        self.prompt = prompt
        self.keys = [k for k, _ in entries or ()] + ([PROMPT_KEY] if prompt is not None else [])

    def __call__(self, observation: Any) -> dict[str, Any]:
        roles = self.reader(observation) if self.reader is not None else {}
        if self.entries is None:  # no map and no space known: the value decides
            out = _flatten(observation)
        else:
            out = {key: get(observation, roles) for key, get in self.entries}
        prompt = self.prompt
        if prompt is not None:
            out[PROMPT_KEY] = prompt if isinstance(prompt, str) else prompt(observation, roles)
        return out


def _flatten(observation: Any, prefix: str = "") -> dict[str, Any]:
    """A Dict observation key by key (nested keys joined with ``/``); anything else as the state."""
    if not isinstance(observation, Mapping):
        return {prefix or DEFAULT_STATE_KEY: observation}
    out: dict[str, Any] = {}
    for k, v in observation.items():
        path = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, path))
        else:
            out[path] = v
    return out


def _default_entries(space: Any) -> list[tuple[str, Getter]] | None:
    if space is None:
        return None
    if _children(space) is None:
        return [(DEFAULT_STATE_KEY, _loose_getter("", DEFAULT_STATE_KEY))]
    out = []
    for path in _paths(space):
        found = _walk(space, path)
        assert found is not None
        out.append((path, _getter(found[0], path, path)))
    return out


def compile_obs_map(
    obs_map: Mapping[str, Any] | None,
    contract: Any,
    *,
    prompt: str | None,
) -> ObservationMapper:
    """Check ``obs_map`` against an env contract and compile it (see the module docstring).

    ``prompt`` is the text to send as ``"prompt"`` when the map has no such entry; without
    one, the env's instruction role (``rlmesh.adapters.INSTRUCTION``) is read if it has one.

    Raises:
        AdapterResolutionError: an entry names no path or role of this env, or an
            image entry points at something that is no image; the message names the key.
        TypeError: an entry of an unknown kind.
    """
    binder = _Binder(contract)
    entries: list[tuple[str, Getter]] | None
    if obs_map is None:
        entries = _default_entries(binder.space)
    else:
        entries = []
        for key, entry in obs_map.items():
            if not isinstance(key, str):
                raise TypeError(f"obs_map keys are the server's key strings, got {key!r}")
            if isinstance(entry, str):
                get, _ = binder.source(key, entry)
            elif isinstance(entry, Image):
                get = _image_getter(key, entry, binder)
            elif isinstance(entry, State):
                get = _state_getter(key, entry, binder)
            elif isinstance(entry, _ADAPTER_LEAVES):
                if isinstance(entry, _adapters.Concat) and len(entry.parts) != 1:
                    raise TypeError(
                        f"obs_map[{key!r}]: a Concat of several roles is read as "
                        "rlmesh.openpi.State(role, role, ...); an adapters leaf reads one role"
                    )
                get = binder.role(entry)
            else:
                raise TypeError(
                    f"obs_map[{key!r}] must be a path or role string, rlmesh.openpi.Image/State, or an "
                    f"rlmesh.adapters leaf; got {type(entry).__name__}"
                )
            entries.append((key, get))
    keys = {k for k, _ in entries or ()}
    prompt_source: Getter | str | None = None
    if PROMPT_KEY not in keys:
        if prompt is not None:
            prompt_source = prompt
        elif _adapters.INSTRUCTION in binder.roles:
            prompt_source = binder.role(_adapters.INSTRUCTION)
    reader = None
    if binder.role_items:
        reader = _adapters.build_reader(contract, *binder.role_items)
    return ObservationMapper(entries, reader, prompt_source)


def obs_map_from_json(data: Any) -> dict[str, Any]:
    """An obs_map from plain data (``rlmesh eval --obs-map JSON``).

    A value is a path or role string, ``{"image": SOURCE, "size": N or [H, W], "dtype": ...,
    "resample": ...}`` (an :class:`Image`) or ``{"state": SOURCE or [SOURCE, ...], "dtype":
    ...}`` (a :class:`State`).

    >>> obs_map_from_json({"observation/image": {"image": "pixels", "size": 224}, "observation/state": ""})
    {'observation/image': Image(source='pixels', size=(224, 224), dtype='uint8', resample='bilinear'), 'observation/state': ''}

    Raises:
        ValueError: not an object of such values.
    """
    if not isinstance(data, Mapping):
        raise ValueError(
            f"an obs_map is a JSON object (server key -> entry), got {type(data).__name__}"
        )
    out: dict[str, Any] = {}
    for key, entry in data.items():
        if isinstance(entry, str):
            out[key] = entry
        elif isinstance(entry, Mapping) and "image" in entry:
            extra = set(entry) - {"image", "size", "dtype", "resample"}
            if extra:
                raise ValueError(f"obs_map[{key!r}]: unknown image option(s) {sorted(extra)}")
            size = entry.get("size")
            out[key] = Image(
                entry["image"],
                size=tuple(size) if isinstance(size, list) else size,
                dtype=entry.get("dtype", "uint8"),
                resample=entry.get("resample", "bilinear"),
            )
        elif isinstance(entry, Mapping) and "state" in entry:
            extra = set(entry) - {"state", "dtype"}
            if extra:
                raise ValueError(f"obs_map[{key!r}]: unknown state option(s) {sorted(extra)}")
            sources = entry["state"]
            sources = [sources] if isinstance(sources, str) else list(sources)
            out[key] = State(*sources, dtype=entry.get("dtype"))
        else:
            raise ValueError(
                f'obs_map[{key!r}] must be a path or role string, {{"image": ...}} or '
                f'{{"state": ...}}; got {entry!r}'
            )
    return out
