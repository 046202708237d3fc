"""``load_target``: the one loader of ``module:attr`` and ``path/to/file.py:attr`` targets.

Every command line (``rlmesh serve``, ``serve-model``, ``eval``, ``describe``,
``python -m rlmesh.serve``) and every library path that takes a target string
(``serve_env("pkg.envs:make")``, the session pool's workers, Ray actors, the sandbox
bootstrap) resolves it here, so they accept the same forms and fail the same way:

- ``module:attr``, ``module:Outer.inner``: import ``module``, then walk the dotted attribute;
- ``path/to/file.py:attr``: the file's directory goes first on ``sys.path`` and the file is
  imported as the module named after its stem (as ``python path/to/file.py`` would see it).

It sits with the foundations (it imports nothing of rlmesh), below ``serve/`` and the
command lines in :mod:`rlmesh._cli` that use it.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["importable", "load_target", "split_target"]

_FORMS = "'module:attr' or 'path/to/file.py:attr' (e.g. 'my_envs.factory:MyFactory')"


def split_target(spec: str) -> tuple[str, str]:
    """``(module_or_path, attr)`` of a target, or ``ValueError`` when it has neither form.

    The file form splits at the last colon (a path may hold one); the module form at the first.

    >>> split_target("pkg.envs:Factory.make")
    ('pkg.envs', 'Factory.make')
    >>> split_target("dir/my_env.py:make")
    ('dir/my_env.py', 'make')
    """
    head, sep, tail = spec.rpartition(":")
    if not (sep and head.endswith(".py")):
        head, sep, tail = spec.partition(":")
    if not sep or not head or not tail or any(not part for part in tail.split(".")):
        raise ValueError(f"expected a target of the form {_FORMS}, got {spec!r}")
    return head, tail


def importable(spec: str, *, cwd: bool = False) -> str:
    """The ``module:attr`` to import for ``spec``, with what it needs put on ``sys.path``.

    ``path/to/file.py:attr`` becomes ``file:attr`` with the file's directory first on
    ``sys.path``; any other string is returned as it is. ``cwd=True`` (the command lines)
    makes the current directory importable first, as ``python -m`` does.

    Raises:
        FileNotFoundError: a ``.py`` path that names no file.
    """
    if cwd:
        here = os.getcwd()
        if here not in sys.path:
            sys.path.insert(0, here)
    head, sep, attr = spec.rpartition(":")
    if not (sep and head.endswith(".py")):
        return spec
    path = Path(head).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {head}")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    return f"{path.stem}:{attr}"


def load_target(spec: str, *, cwd: bool = False, missing: type[Exception] = AttributeError) -> Any:
    """Import a ``module:attr`` or ``path/to/file.py:attr`` target and return the attribute.

    Args:
        spec: The target string.
        cwd: Make the current directory importable first (the command lines do, as
            ``python -m`` does; library callers leave ``sys.path`` to their user).
        missing: The error raised when the module has no such attribute (``describe``
            documents ``ImportError``).

    Raises:
        ValueError: ``spec`` has neither form (no colon, an empty module or attribute).
        FileNotFoundError: a ``.py`` path that names no file.
        ModuleNotFoundError: Python's own, unchanged: ``exc.name`` is the module that is
            missing (the target's, or one its module imports).
        AttributeError: (or ``missing``) the module has no such attribute; the message
            names the module and the target
            (``cannot import 'mak' from 'pkg.envs' (target 'pkg.envs:mak')``).
    """
    split_target(spec)
    module_name, _, attr = importable(spec, cwd=cwd).partition(":")
    obj: Any = importlib.import_module(module_name)
    parts = attr.split(".")
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = ".".join([module_name, *parts[:i]])
            raise missing(f"cannot import {part!r} from {where!r} (target {spec!r})") from None
    return obj
