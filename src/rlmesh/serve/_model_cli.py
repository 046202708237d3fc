"""``rlmesh serve-model TARGET --address ADDR``: serve a model for ``RemoteModel`` clients (MOD-33).

TARGET is ``module:attr`` naming a Model subclass (built with ``from_config(**binding)``),
a Model instance (served as is), or a bare predict callable / policy object (wrapped in
``rlmesh.numpy.Model``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
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
    p.add_argument(
        "--address",
        default=os.environ.get("RLMESH_ADDRESS") or f"0.0.0.0:{os.environ.get('RLMESH_PORT', '50051')}",
    )
    p.add_argument("--kwargs-json", default=os.environ.get("RLMESH_MAKE_KWARGS"))
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workflow-edition", default=None)
    p.add_argument("--allow-remote-shutdown", action="store_true")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="SECONDS")
    p.add_argument("--ready-file", default=None)
    p.add_argument("--ready-fd", type=int, default=None)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    try:
        from ._cli import _parse_params, _write_ready_file, write_ready_fd
        from ._model import ModelServer
        from ._options import ServeOptions

        binding: dict[str, Any] = {}
        if args.kwargs_json:
            loaded = json.loads(args.kwargs_json)
            if not isinstance(loaded, dict):
                raise ValueError("--kwargs-json must be a JSON object")
            binding.update(loaded)
        binding.update(_parse_params(args.param))
        model = load_model_target(args.target, binding)
        if getattr(model, "_spec", None) is None:
            print("RLMesh: the served model declares no spec; clients drive it with raw env values", file=sys.stderr)
        options = ServeOptions(
            allow_remote_shutdown=args.allow_remote_shutdown,
            idle_timeout_seconds=args.idle_timeout,
            workflow_edition=args.workflow_edition,
        )
        server = ModelServer(model, args.address, options=options)
        if args.ready_fd is not None:
            write_ready_fd(args.ready_fd, server.address)
        if args.ready_file:
            _write_ready_file(args.ready_file, server.address)
        print(f"RLMesh serving model on {server.address}", flush=True)
        try:
            server.serve()
        except KeyboardInterrupt:
            return 130
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
