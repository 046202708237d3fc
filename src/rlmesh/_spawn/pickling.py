"""What travels to another process, and the one check that it can.

Workers (session workers, distributed-eval workers, Ray actors) get their env recipe,
model and job as bytes made by ``cloudpickle`` (a dependency of rlmesh, ~20 kB, pure
Python; Ray vendors the same library). It pickles what an importable module defines
by reference and what a script defines (``__main__``: functions, classes, lambdas) by
value, so a worker never imports the user's script and a script needs no
``if __name__ == "__main__":`` guard.

Something that cannot travel (a lock, an open socket, a CUDA context, a generator) is
refused here, in the parent, with one line that names the object -- and, when the culprit
is an attribute inside it, that attribute -- and says what to pass instead.
"""

from __future__ import annotations

import functools
import pickle
import types
from typing import Any

import cloudpickle

__all__ = ["dumps", "loads", "portable_error", "short_repr"]

#: How deep :func:`dumps` looks inside an object for the attribute that cannot be pickled.
_SEARCH_DEPTH = 3
_SEARCH_ITEMS = 200


def short_repr(obj: Any, limit: int = 120) -> str:
    """``repr(obj)``, cut to ``limit`` characters (a failing ``repr`` gives ``<TypeName>``)."""
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dumps(obj: Any, what: str, *, who: str, remedy: str) -> bytes:
    """``cloudpickle`` ``obj`` for another process.

    Args:
        obj: What travels.
        what: What it is, for the message (``"model"``, ``"env"``).
        who: What ships it (``"workers="``, ``"sessions=4"``, ``"EnvFleet"``).
        remedy: What to pass instead, ending the message.

    Raises:
        TypeError: ``obj`` cannot be pickled; one line naming it (and the attribute
            inside it that fails, when one does) and ``remedy``.

    Example:
        >>> import threading
        >>> class Policy:
        ...     def __init__(self):
        ...         self.lock = threading.Lock()
        >>> dumps(Policy(), "model", who="workers=", remedy="pass a class")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: workers= sends the model to another process, but <...Policy object at ...>.lock (a _thread.lock) cannot be pickled: ... pass a class
    """
    try:
        data: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return data
    except Exception as exc:
        root = short_repr(obj, 60)
        if root.endswith("..."):
            root = f"<{type(obj).__qualname__}>"
        culprit = _culprit(obj, root, _SEARCH_DEPTH, [_SEARCH_ITEMS])
        name = culprit or f"{short_repr(obj)} ({type(obj).__module__}.{type(obj).__qualname__})"
        reason = str(exc).splitlines()[0] if str(exc) else ""
        raise TypeError(
            f"{who} sends the {what} to another process, but {name} cannot be pickled: "
            f"{type(exc).__name__}: {reason}. {remedy}"
        ) from None  # the pickler's own traceback says nothing the user can act on


def _culprit(obj: Any, path: str, depth: int, budget: list[int]) -> str | None:
    """``path.attr`` of the first attribute (or item) inside ``obj`` that cannot be pickled."""
    if depth <= 0:
        return None
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, functools.partial):
        children = [(f"{path}.func", obj.func)]
        children += [(f"{path}.args[{i}]", v) for i, v in enumerate(obj.args)]
        children += [(f"{path}.keywords[{k!r}]", v) for k, v in obj.keywords.items()]
    elif isinstance(obj, types.FunctionType):  # what it closes over, and its script's globals
        cells = zip(obj.__code__.co_freevars, obj.__closure__ or ())
        children = [(f"{path} (its variable {name!r})", cell.cell_contents) for name, cell in cells]
        scope = obj.__globals__
        children += [
            (f"{path} (its global {name!r})", scope[name])
            for name in obj.__code__.co_names
            if name in scope and not isinstance(scope[name], types.ModuleType)
        ]
    else:
        state = getattr(obj, "__dict__", None)
        if not isinstance(state, dict) or isinstance(obj, type):
            return None
        children = [(f"{path}.{k}", v) for k, v in state.items()]
    for child_path, value in children:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        try:
            cloudpickle.dumps(value)
        except Exception:
            deeper = _culprit(value, child_path, depth - 1, budget)
            return (
                deeper
                or f"{child_path} (a {type(value).__module__}.{type(value).__qualname__})".replace(
                    "(a builtins.", "(a "
                )
            )
    return None


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` made (in the worker)."""
    return pickle.loads(data)


def portable_error(exc: BaseException, where: str) -> BaseException:
    """``exc`` if it survives a pickle round trip (with a note saying where it was raised),
    else a ``RuntimeError`` carrying its type and text."""
    try:
        note = f"raised in {where}"
        clone = pickle.loads(pickle.dumps(exc))
        if type(clone) is type(exc) and str(clone) == str(exc):
            if hasattr(clone, "add_note"):
                clone.add_note(note)
            return clone
    except Exception:
        pass
    return RuntimeError(
        f"{type(exc).__module__}.{type(exc).__qualname__}: {exc} (raised in {where}; not picklable)"
    )
