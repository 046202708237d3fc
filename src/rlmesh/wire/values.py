"""The space-directed leaf codec (sans-IO).

The contract's space tree fixes the layout; values carry no schema. A value is
split into *segments* (raw little-endian bytes of every Box / MultiBinary /
MultiDiscrete leaf, and of batched Discrete leaves) and *scalars* (single
Discrete ints and Text strings, plus batched Text lists, and the plain data of an
opaque space) that ride in the msgpack header. Leaves are visited in pre-order: Dict children in declared key order,
Tuple children by index. A vector endpoint (``lanes=N``) adds a leading lane axis
to every segment leaf.

Input to :meth:`ValueCodec.split` is a *canonical tree* (what
``rlmesh.spaces._values.compile_encoder`` returns): ndarrays of exactly the leaf
dtype and shape, ints, strs, dicts in declared order, tuples. Output of
:meth:`ValueCodec.join` is a canonical tree whose arrays are views of the frame
buffer (writable, never reused). ``join`` checks every length and type exactly
and raises :class:`ProtocolException` on any mismatch.

>>> from rlmesh.spaces._spec import SpaceSpec
>>> spec = SpaceSpec._dict({"img": SpaceSpec._box((2, 2), "uint8", 0, 255),
...                         "n": SpaceSpec._discrete(3)})
>>> codec = ValueCodec(spec)
>>> scalars, segments = codec.split({"img": np.zeros((2, 2), np.uint8), "n": 2})
>>> scalars, [s.nbytes for s in segments]
([2], [4])
>>> codec.join(scalars, [s.reshape(-1).view(np.uint8) for s in segments])["n"]
2
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import np_dtype
from ..errors import ProtocolException
from ..spaces._peers import is_plain
from ..spaces._spec import SpaceSpec

__all__ = ["ValueCodec"]

_Split = Callable[[Any, list[Any], list[Any]], None]
_Join = Callable[[list[Any], list[Any], list[int]], Any]  # (scalars, segments, [si, gi])


class ValueCodec:
    """Split canonical values into (scalars, segments) and join them back, for one space.

    Args:
        spec: The space.
        lanes: ``None`` for one value, ``N`` for a batch of N lanes.

    Attributes:
        segment_count: Segments every value of this space produces.
        scalar_count: Header scalars every value produces.
    """

    def __init__(self, spec: SpaceSpec, lanes: int | None = None) -> None:
        self.spec = spec
        self.lanes = lanes
        self.segment_count = 0
        self.scalar_count = 0
        self._split, self._join = self._compile(spec, "$")
        self._leaf = self._direct_leaf(spec)

    # -- public -----------------------------------------------------------------------

    def split(self, value: Any) -> tuple[list[Any], list[Any]]:
        """Canonical value -> (header scalars, segment arrays). No copies."""
        leaf = self._leaf
        if leaf is not None:  # one leaf at the root (most observations and actions)
            return ([], [value]) if leaf == "segment" else ([value], [])
        scalars: list[Any] = []
        segments: list[Any] = []
        self._split(value, scalars, segments)
        return scalars, segments

    def join(self, scalars: list[Any], segments: list[Any]) -> Any:
        """(header scalars, raw uint8 segment views) -> canonical value.

        Raises:
            ProtocolException: wrong counts, lengths or scalar types.
        """
        if len(scalars) != self.scalar_count or len(segments) != self.segment_count:
            raise ProtocolException(
                f"value for {self.spec!r} needs {self.scalar_count} scalars and "
                f"{self.segment_count} segments, got {len(scalars)} and {len(segments)}"
            )
        return self._join(scalars, segments, [0, 0])

    def _direct_leaf(self, spec: SpaceSpec) -> str | None:
        """``"segment"``/``"scalar"`` when the root itself is the one leaf, else ``None``."""
        if self.segment_count + self.scalar_count != 1 or spec.kind in ("dict", "tuple"):
            return None
        return "segment" if self.segment_count else "scalar"

    # -- compilation ----------------------------------------------------------------------

    def _compile(self, spec: SpaceSpec, path: str) -> tuple[_Split, _Join]:
        kind = spec.kind
        if kind in ("box", "multi_binary", "multi_discrete"):
            shape = tuple(spec._shape)
            return self._array_leaf(np_dtype(spec.dtype), shape, path, spec.dtype == "bool")
        if kind == "discrete":
            if self.lanes is not None:
                return self._array_leaf(np_dtype(spec.dtype), (), path, False)
            return self._scalar_leaf(int, path, "an integer")
        if kind == "text":
            if self.lanes is not None:
                return self._text_batch_leaf(path)
            return self._scalar_leaf(str, path, "a string")
        if kind == "opaque":  # plain data in the header, as Text (spaces._opaque)
            return self._plain_leaf(path)
        if kind == "dict":
            keys = [k for k, _ in spec._children()]
            parts = [self._compile(child, f"{path}.{k}") for k, child in spec._children()]
            splits = [s for s, _ in parts]
            joins = [j for _, j in parts]
            pairs = list(zip(keys, splits))

            def split_dict(value: Any, scalars: list[Any], segments: list[Any]) -> None:
                for key, fn in pairs:
                    fn(value[key], scalars, segments)

            def join_dict(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
                return {key: fn(scalars, segments, cur) for key, fn in zip(keys, joins)}

            return split_dict, join_dict
        if kind == "tuple":
            parts = [self._compile(child, f"{path}[{i}]") for i, child in spec._children()]
            splits = [s for s, _ in parts]
            joins = [j for _, j in parts]

            def split_tuple(value: Any, scalars: list[Any], segments: list[Any]) -> None:
                for item, fn in zip(value, splits):
                    fn(item, scalars, segments)

            def join_tuple(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
                return tuple(fn(scalars, segments, cur) for fn in joins)

            return split_tuple, join_tuple
        raise ValueError(f"unsupported RLMesh space kind: {kind!r}")  # pragma: no cover

    def _array_leaf(
        self, dtype: np.dtype[Any], shape: tuple[int, ...], path: str, is_bool: bool
    ) -> tuple[_Split, _Join]:
        self.segment_count += 1
        full = shape if self.lanes is None else (self.lanes, *shape)
        nbytes = dtype.itemsize
        for d in full:
            nbytes *= d

        def split(value: Any, scalars: list[Any], segments: list[Any]) -> None:
            segments.append(value)

        def join(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
            raw = segments[cur[1]]
            cur[1] += 1
            if raw.nbytes != nbytes:
                raise ProtocolException(
                    f"{path}: segment carries {raw.nbytes} bytes; {dtype.name}{list(full)} needs {nbytes}"
                )
            if is_bool and nbytes and int(raw.max()) > 1:
                raise ProtocolException(f"{path}: bool segment holds bytes other than 0 and 1")
            return raw.view(dtype).reshape(full)

        return split, join

    def _scalar_leaf(self, tp: type, path: str, what: str) -> tuple[_Split, _Join]:
        self.scalar_count += 1

        def join(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
            value = scalars[cur[0]]
            cur[0] += 1
            if type(value) is not tp:
                raise ProtocolException(f"{path}: expected {what}, got {type(value).__name__}")
            return value

        return _split_scalar, join

    def _plain_leaf(self, path: str) -> tuple[_Split, _Join]:
        self.scalar_count += 1
        lanes = self.lanes

        def join(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
            value = scalars[cur[0]]
            cur[0] += 1
            if lanes is not None and (type(value) is not list or len(value) != lanes):
                raise ProtocolException(f"{path}: expected a list of {lanes} plain values")
            if not is_plain(value):
                raise ProtocolException(f"{path}: an opaque value must be plain data")
            return value

        return _split_scalar, join

    def _text_batch_leaf(self, path: str) -> tuple[_Split, _Join]:
        self.scalar_count += 1
        lanes = self.lanes

        def join(scalars: list[Any], segments: list[Any], cur: list[int]) -> Any:
            value = scalars[cur[0]]
            cur[0] += 1
            if (
                type(value) is not list
                or len(value) != lanes
                or not all(type(v) is str for v in value)
            ):
                raise ProtocolException(f"{path}: expected a list of {lanes} strings")
            return value

        return _split_scalar, join


def _split_scalar(value: Any, scalars: list[Any], segments: list[Any]) -> None:
    """Every leaf that travels among the scalars (numbers, strings, plain data) splits alike."""
    scalars.append(value)
