"""Start a sandboxed env server on either backend and hand back a handle (SBX-1..19).

A handle (``_docker.Container`` or ``_venv.ServerProcess``) has ``address``, ``id``,
``backend``, ``describe()``, ``logs_tail(n)``, ``alive()`` and ``stop()``; the
client classes only see that shape.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._token import new_token
from ._docker import DockerCLI, build_image, start_container
from ._errors import DockerUnavailable
from ._options import SandboxBuild, SandboxInfo, SandboxRuntime, binding_json, check_params
from ._plan import make_plan, sanitize_slug
from ._progress import Progress
from ._source import Source, classify_env_source
from ._venv import ensure_venv, start_server

__all__ = ["BACKENDS", "choose_backend", "start_env_sandbox"]

BACKENDS = ("auto", "docker", "venv")


def check_options(build: Any, runtime: Any) -> tuple[SandboxBuild, SandboxRuntime | None]:
    if build is not None and not isinstance(build, SandboxBuild):
        raise TypeError(f"build must be a SandboxBuild, got {type(build).__name__}")
    if runtime is not None and not isinstance(runtime, SandboxRuntime):
        raise TypeError(f"runtime must be a SandboxRuntime, got {type(runtime).__name__}")
    return build or SandboxBuild(), runtime


def check_timeout(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > 0
        or value == float("inf")
    ):
        raise ValueError(f"connect_timeout_seconds must be a positive finite number, got {value!r}")
    return float(value)


def choose_backend(requested: str | None, source: Source, cli: DockerCLI) -> str:
    """``auto``: Docker for image sources; for gym/hf sources Docker if its daemon answers, else venv."""
    backend = (
        requested if requested is not None else (os.environ.get("RLMESH_SANDBOX_BACKEND") or "auto")
    )
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
        )
    if not source.build:
        if backend == "venv":
            raise ValueError(
                f"{source.requested!r} is a prebuilt image: it needs backend='docker' (or 'auto')"
            )
        return "docker"
    if backend == "auto":
        return "docker" if cli.cli_available() and cli.daemon_running() else "venv"
    return backend


def check_source_options(
    source: Source, build: SandboxBuild, runtime: SandboxRuntime | None, backend: str
) -> None:
    """SBX-5: security grants are never silently ignored; runtime flags only for a prebuilt image."""
    if not source.build:
        if build.trust_remote_code or build.allow_unpinned_hf:
            raise ValueError(
                f"trust_remote_code / allow_unpinned_hf apply to hf:// builds; {source.requested!r} is a prebuilt image"
            )
        ignored = build.options_set()
        if ignored:
            warnings.warn(
                f"{source.requested!r} is a prebuilt image: build options {', '.join(ignored)} are ignored",
                UserWarning,
                stacklevel=4,
            )
    elif runtime is not None and runtime.flags_set():
        raise ValueError(
            f"runtime options ({', '.join(runtime.flags_set())}) are only supported for a prebuilt sandbox image "
            f"(docker://...), not for {source.requested!r}"
        )


def start_env_sandbox(
    source: Any,
    *,
    num_envs: int,
    vectorization_mode: str | None,
    build: Any,
    runtime: Any,
    backend: str | None,
    connect_timeout_seconds: Any,
    params: Mapping[str, Any],
) -> tuple[Any, SandboxInfo]:
    """Classify, build if needed, start and wait for readiness; the caller owns the returned handle."""
    timeout = check_timeout(connect_timeout_seconds)
    build, runtime = check_options(build, runtime)
    check_params(params)
    token = new_token()  # this sandbox's own: its server requires it, its client sends it
    kwargs = json.loads(binding_json(params))
    cli = DockerCLI()
    src = classify_env_source(source, lambda: cli)
    chosen = choose_backend(backend, src, cli)
    check_source_options(src, build, runtime, chosen)
    progress = Progress(str(source))
    ok = False
    try:
        common = (cli, kwargs, num_envs, vectorization_mode, timeout, progress, token)
        if src.build:
            handle, resolved = _start_build(src, build, runtime, chosen, *common)
        else:
            handle, resolved = _start_prebuilt(src, runtime, *common), src.resolved
        ok = True
    finally:
        progress.done("ready" if ok else "failed")
    info = SandboxInfo(str(source), resolved, handle.address, handle.id, handle.backend)
    return handle, info


def _start_build(
    src: Source,
    build: SandboxBuild,
    runtime: SandboxRuntime | None,
    backend: str,
    cli: DockerCLI,
    kwargs: dict[str, Any],
    num_envs: int,
    mode: str | None,
    timeout: float,
    progress: Progress,
    token: str | None = None,
) -> tuple[Any, str]:
    with tempfile.TemporaryDirectory(prefix="rlmesh-sbx-plan-") as tmp:
        if backend == "docker":
            cli.ensure_daemon()
        progress.phase("preparing build")
        plan = make_plan(src, build, Path(tmp))
        if backend == "docker":
            tag = build_image(cli, plan, progress)
            boot = plan.bootstrap_spec(
                kwargs=kwargs,
                num_envs=num_envs,
                vectorization_mode=mode,
                source_dir="/opt/rlmesh/source",
            )
            hint = ""
            if plan.wheel is None:
                hint = (
                    f"\n(hint: the sandbox installed rlmesh from {plan.package!r}; if the host and sandbox "
                    "versions differ, use SandboxBuild(rlmesh_package='local'))"
                )
            handle = start_container(
                cli,
                tag,
                slug=plan.slug,
                env={"RLMESH_BOOTSTRAP_JSON": json.dumps(boot, sort_keys=True)},
                runtime=runtime,
                connect_timeout_seconds=timeout,
                progress=progress,
                hint=hint,
                token=token,
            )
            return handle, plan.resolved_source()
        root = ensure_venv(plan, progress)
        boot = plan.bootstrap_spec(
            kwargs=kwargs,
            num_envs=num_envs,
            vectorization_mode=mode,
            source_dir=str(root / "source"),
        )
        server = start_server(
            root,
            boot,
            env={},
            connect_timeout_seconds=timeout,
            progress=progress,
            label=plan.venv_name,
            token=token,
        )
        return server, plan.resolved_source()


def prebuilt_env(
    kwargs: Mapping[str, Any], num_envs: int | None, mode: str | None
) -> dict[str, str]:
    """SBX-14: ``RLMESH_MAKE_KWARGS`` if non-empty, ``RLMESH_NUM_ENVS`` if != 1, the mode if set."""
    env: dict[str, str] = {}
    if kwargs:
        env["RLMESH_MAKE_KWARGS"] = json.dumps(dict(kwargs), sort_keys=True, separators=(",", ":"))
    if num_envs is not None and num_envs != 1:
        env["RLMESH_NUM_ENVS"] = str(num_envs)
    if mode is not None:
        env["RLMESH_VECTORIZATION_MODE"] = mode
    return env


def _start_prebuilt(
    src: Source,
    runtime: SandboxRuntime | None,
    cli: DockerCLI,
    kwargs: dict[str, Any],
    num_envs: int | None,
    mode: str | None,
    timeout: float,
    progress: Progress,
    token: str | None = None,
) -> Any:
    cli.ensure_daemon()
    if not cli.image_exists(src.value):
        progress.phase(f"pulling {src.value}")
        import sys

        print(f"rlmesh: pulling image {src.value!r} ...", file=sys.stderr, flush=True)
        try:
            cli.pull(src.value)
        except DockerUnavailable:
            raise
        except Exception as exc:
            raise ValueError(
                f"image {src.value!r} is not available locally and could not be pulled: {exc}"
            ) from None
    return start_container(
        cli,
        src.value,
        slug=sanitize_slug(src.value.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]),
        env=prebuilt_env(kwargs, num_envs, mode),
        runtime=runtime,
        connect_timeout_seconds=timeout,
        progress=progress,
        token=token,
    )
