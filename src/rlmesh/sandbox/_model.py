"""``SandboxModel``: a model policy served from its own (prebuilt) container (SBX-2, SBX-23..26).

The image is "rlmesh-serving" (BYO, SBX-25) when its command serves a model on
``$RLMESH_ADDRESS`` (the sandbox sets ``0.0.0.0:50051``), e.g. ``python -m rlmesh.serve
pkg:MyPolicy`` or ``MyPolicy().serve(os.environ.get("RLMESH_ADDRESS", "0.0.0.0:50051"))``.
Construction params arrive as ``RLMESH_MAKE_KWARGS``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from .._token import new_token
from ..client._model import RemoteModel, RemoteRoute
from ..eval._api import check_served_horizon, run as run_eval
from ..eval._drive import Drive
from ..eval._session import new_session
from ..eval._targets import classify_target
from ..view._config import normalize_view
from ._docker import DockerCLI, start_container
from ._launch import check_timeout, prebuilt_env
from ._options import SandboxRuntime, binding_json, check_params
from ._plan import sanitize_slug
from ._progress import Progress
from ._source import classify_model_source

__all__ = ["SandboxModel"]


class _ContainerOwner:
    """Handed to the session as its owned model: closing the session stops a container it started."""

    def __init__(self, model: SandboxModel, owns: bool) -> None:
        self.model = model  # keeps the handle alive for the session's lifetime
        self.owns = owns

    def close(self) -> None:
        if self.owns:
            self.model.shutdown()


class SandboxModel:
    """Run a model policy in its own container (experimental).

    Construction is inert (no Docker call). ``serve()`` starts the container (idempotent),
    ``shutdown()`` stops and removes it (idempotent, retryable); ``with SandboxModel(...)``
    does both. ``session(env)`` starts it if needed, and then the session owns it.

    Args:
        source: A prebuilt image: ``docker://repo/policy:tag`` (or ``image://``, or bare).
        runtime: :class:`SandboxRuntime` (``gpus="all"``, CDI ``devices``, ``volumes``, ``user``).
        **params: ``load()`` keyword arguments, sent as ``RLMESH_MAKE_KWARGS`` (JSON values).
    """

    def __init__(
        self, source: str, /, *, runtime: SandboxRuntime | None = None, **params: Any
    ) -> None:
        self._source = classify_model_source(source)
        if runtime is not None and not isinstance(runtime, SandboxRuntime):
            raise TypeError(f"runtime must be a SandboxRuntime, got {type(runtime).__name__}")
        check_params(params)
        self._binding = json.loads(binding_json(params))
        self._runtime = runtime
        self._handle: Any = None
        self.source = source

    @property
    def image(self) -> str:
        return self._source.value

    @property
    def serving(self) -> bool:
        return self._handle is not None

    def _require(self) -> Any:
        if self._handle is None:
            raise RuntimeError(
                "SandboxModel is not serving; call serve() or use it in a `with` block first"
            )
        return self._handle

    @property
    def address(self) -> str:
        """The container's model endpoint (``tcp://127.0.0.1:P``)."""
        return str(self._require().address)

    @property
    def container_id(self) -> str:
        return str(self._require().id)

    @property
    def token(self) -> str | None:
        """The container's endpoint token (random per container; its clients send it)."""
        return getattr(self._require(), "token", None)

    def serve(self, *, connect_timeout_seconds: float = 30.0) -> SandboxModel:
        """Start the container and wait until the model answers (idempotent); returns ``self``."""
        if self._handle is not None:
            return self
        timeout = check_timeout(connect_timeout_seconds)
        cli = DockerCLI()
        cli.ensure_daemon()
        if not cli.image_exists(self.image):
            import sys

            print(f"rlmesh: pulling image {self.image!r} ...", file=sys.stderr, flush=True)
            cli.pull(self.image)
        progress = Progress(self.image)
        ok = False
        try:
            self._handle = start_container(
                cli,
                self.image,
                slug=sanitize_slug(self.image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]),
                env=prebuilt_env(self._binding, None, None),
                runtime=self._runtime,
                connect_timeout_seconds=timeout,
                progress=progress,
                token=new_token(),  # this container's own: only its clients know it
            )
            ok = True
        finally:
            progress.done("ready" if ok else "failed")
        return self

    def shutdown(self) -> None:
        """Stop and remove the container (idempotent; a failed stop can be retried)."""
        handle = self._handle
        if handle is not None:
            handle.stop()
            self._handle = None

    def session(
        self,
        env: Any,
        *,
        instruction: str | None = None,
        close_env: bool = False,
        trust_entrypoints: bool | None = None,
        execution_horizon: int = 1,
        connect_timeout_seconds: float = 30.0,
        view: Any = None,
        workflow_edition: str | None = None,
    ) -> Any:
        """Bind the served model to ``env`` and return a Session (SBX-24, DELTA-26).

        Starts the container if it is not serving; the session then owns it (closing the
        session stops it). A container started with :meth:`serve` / ``with`` outlives its sessions.
        """
        if instruction is not None:
            raise ValueError(
                "a sandboxed model rejects instruction=; the env's own instruction is used"
            )
        if trust_entrypoints is not None:
            raise ValueError(
                "a sandboxed model rejects trust_entrypoints=; the container decides what it loads"
            )
        check_served_horizon(execution_horizon)
        view_cfg = normalize_view(view)
        kind = classify_target(env)
        started_here = self._handle is None
        self.serve(connect_timeout_seconds=connect_timeout_seconds)
        try:
            remote = RemoteModel(
                self.address, connect_timeout_seconds=connect_timeout_seconds, token=self.token
            )
            route = RemoteRoute(
                remote, execution_horizon=execution_horizon, workflow_edition=workflow_edition
            )
            return new_session(
                Drive(
                    route,
                    env,
                    kind,
                    close_env=close_env,
                    workflow_edition=workflow_edition,
                    owned_model=_ContainerOwner(self, started_here),
                    view=view_cfg,
                )
            )
        except BaseException:
            if started_here:
                with contextlib.suppress(Exception):
                    self.shutdown()
            raise

    def run(self, env: Any, **kwargs: Any) -> Any:
        """``rlmesh.run(self, env, **kwargs)``."""
        return run_eval(self, env, **kwargs)

    def __enter__(self) -> SandboxModel:
        return self.serve()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()

    def __repr__(self) -> str:
        where = (
            f", address={self._handle.address!r}, container_id={self._handle.id[:12]!r}"
            if self._handle
            else ""
        )
        return f"SandboxModel({self.source!r}{where})"
