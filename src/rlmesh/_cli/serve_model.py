"""``rlmesh serve-model TARGET --address ADDR``: serve a model for ``RemoteModel`` clients (MOD-33).

``--protocol openpi`` serves it on openpi's WebSocket policy-server wire instead (``ws://``;
openpi-client's ``WebsocketClientPolicy`` and ``rlmesh.openpi.PolicyClient`` connect to it).

TARGET is ``module:attr`` naming a Model subclass (built with ``from_config(**binding)``),
a Model instance (served as is), or a bare predict callable / policy object (wrapped in
``rlmesh.numpy.Model``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .._target import load_target
from ..models import ModelBase, NumpyModel
from ..models._base import declared_spec
from ..serve._model import ModelServer
from ._serving import (
    add_address_flag,
    add_binding_flags,
    add_endpoint_flags,
    add_ready_flags,
    announce,
    binding_of,
    options_of,
    run_command,
    serve_until_stopped,
)

__all__ = ["load_model_target", "main"]


def load_model_target(target: str, binding: dict[str, Any] | None = None) -> Any:
    """Resolve ``module:attr`` to a servable model instance.

    Raises:
        TypeError: a binding for a target that is not a Model subclass, or a class
            that defines no ``load``.
    """
    if ":" not in target:
        raise ValueError(f"model TARGET must be module:attr, got {target!r}")
    obj = load_target(target)
    binding = dict(binding or {})
    if isinstance(obj, type) and issubclass(obj, ModelBase):
        if binding and obj.load is ModelBase.load:
            raise TypeError(
                f"{obj.__name__} does not override load(); it takes no --param/--kwargs-json binding"
            )
        return obj.from_config(**binding)
    if binding:
        raise TypeError(
            f"{target} is not a Model subclass; a binding (--param/--kwargs-json) needs one"
        )
    if isinstance(obj, ModelBase):
        return obj
    return NumpyModel(obj)


def main(argv: Sequence[str] | None = None, *, prog: str = "rlmesh serve-model") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Serve a model for RemoteModel clients.")
    p.add_argument(
        "target", help="module:attr: a Model subclass, a Model instance, or a predict callable"
    )
    add_address_flag(p)
    add_binding_flags(
        p,
        kwargs_help="JSON object passed to from_config() (default: $RLMESH_MAKE_KWARGS or none)",
        param_help="one from_config() parameter (repeatable; default: none)",
    )
    add_endpoint_flags(p)
    p.add_argument(
        "--sessions",
        type=int,
        default=1,
        metavar="N",
        help="serve up to N clients at once on this one loaded model, each with its own bind and episodes "
        "(default: 1)",
    )
    p.add_argument(
        "--no-fuse",
        dest="fuse",
        action="store_false",
        help="with --sessions N, answer every predict in turn instead of fusing requests that arrive together "
        "into one predict_batch forward (default: fuse when the model defines predict_batch)",
    )
    p.add_argument(
        "--protocol",
        choices=("rlmesh", "openpi"),
        default="rlmesh",
        help="the wire: rlmesh (for RemoteModel) or openpi (openpi's WebSocket policy server, for "
        "openpi-client and rlmesh.openpi.PolicyClient; see docs/openpi.md) (default: rlmesh)",
    )
    p.add_argument(
        "--execution-horizon",
        type=int,
        default=None,
        metavar="H",
        help="with --protocol openpi: the chunk length each reply carries for a chunk model "
        "(default: the model's native_chunk, else 1)",
    )
    add_ready_flags(p)
    p.add_argument(
        "--verbose", action="store_true", help="print tracebacks on errors (default: one line)"
    )
    args = p.parse_args(argv)
    if args.sessions < 1:
        p.error(f"--sessions must be >= 1, got {args.sessions}")
    if args.execution_horizon is not None and args.protocol != "openpi":
        p.error("--execution-horizon is for --protocol openpi (an rlmesh client sends its own)")

    def body() -> int:
        options = options_of(args, "rlmesh serve-model")  # before the model loads
        model = load_model_target(args.target, binding_of(args))
        if args.protocol == "openpi":
            server = ModelServer(
                model,
                args.address,
                options=options,
                sessions=args.sessions,
                protocol="openpi",
                execution_horizon=args.execution_horizon,
            )
            announce(args, "model", server.address, server=server)
            return serve_until_stopped(server)
        if declared_spec(model) is None:
            print(
                "RLMesh: the served model declares no spec; clients drive it with raw env values",
                file=sys.stderr,
            )
        server = ModelServer(
            model, args.address, options=options, sessions=args.sessions, fuse=args.fuse
        )
        announce(args, "model", server.address, server=server)
        return serve_until_stopped(server)

    return run_command(args, body)
