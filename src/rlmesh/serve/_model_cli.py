"""``rlmesh serve-model TARGET --address ADDR``: serve a model for ``RemoteModel`` clients (MOD-33).

TARGET is ``module:attr`` naming a Model subclass (built with ``from_config(**binding)``),
a Model instance (served as is), or a bare predict callable / policy object (wrapped in
``rlmesh.numpy.Model``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["load_model_target", "main"]


def load_model_target(target: str, binding: dict[str, Any] | None = None) -> Any:
    """Resolve ``module:attr`` to a servable model instance.

    Raises:
        TypeError: a binding for a target that is not a Model subclass, or a class
            that defines no ``load``.
    """
    from ..models import ModelBase, NumpyModel
    from ._cli import _load_attr

    if ":" not in target:
        raise ValueError(f"model TARGET must be module:attr, got {target!r}")
    obj = _load_attr(target)
    binding = dict(binding or {})
    if isinstance(obj, type) and issubclass(obj, ModelBase):
        if binding and obj.load is ModelBase.load:
            raise TypeError(f"{obj.__name__} does not override load(); it takes no --param/--kwargs-json binding")
        return obj.from_config(**binding)
    if binding:
        raise TypeError(f"{target} is not a Model subclass; a binding (--param/--kwargs-json) needs one")
    if isinstance(obj, ModelBase):
        return obj
    return NumpyModel(obj)


def main(argv: Sequence[str] | None = None, *, prog: str = "rlmesh serve-model") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Serve a model for RemoteModel clients.")
    p.add_argument("target", help="module:attr: a Model subclass, a Model instance, or a predict callable")
    from ._cli import default_address

    p.add_argument("--address", default=default_address())
    p.add_argument("--kwargs-json", default=os.environ.get("RLMESH_MAKE_KWARGS"))
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workflow-edition", default=None)
    p.add_argument("--allow-remote-shutdown", action="store_true")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="SECONDS")
    p.add_argument("--ready-file", default=None)
    p.add_argument("--ready-fd", type=int, default=None)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    from ._cli import announce, binding_of, options_of, run_command, serve_until_stopped
    from ._model import ModelServer

    def body() -> int:
        model = load_model_target(args.target, binding_of(args))
        if getattr(model, "_spec", None) is None:
            print("RLMesh: the served model declares no spec; clients drive it with raw env values", file=sys.stderr)
        server = ModelServer(model, args.address, options=options_of(args))
        announce(args, "model", server.address)
        return serve_until_stopped(server)

    return run_command(args, body)
