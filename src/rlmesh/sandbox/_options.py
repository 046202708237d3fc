"""Sandbox options: ``SandboxBuild``, ``SandboxRuntime``, ``SandboxInfo`` and the binding (SBX-3, SBX-4)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SandboxBuild", "SandboxInfo", "SandboxRuntime", "binding_json", "check_params"]


def _strings(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name}= expects a sequence of strings, not a bare str (write [{value!r}])"
        )
    if not isinstance(value, Sequence) and not isinstance(value, (set, frozenset)):
        raise TypeError(f"{name}= expects a sequence of strings, got {type(value).__name__}")
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise TypeError(f"{name}= expects non-blank strings, got {item!r}")
        if "\n" in item:
            raise ValueError(f"{name}= entries must be one line, got {item!r}")
        out.append(item.strip())
    return tuple(out)


def _optional_text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name}= must be a str or None, got {type(value).__name__}")
    text = value.strip()
    if not text or "\n" in text or "\r" in text:
        raise ValueError(f"{name}= must be a non-empty single line, got {value!r}")
    return text


@dataclass(frozen=True)
class SandboxBuild:
    """How a build-from-source sandbox is built (SBX-3, SBX-6..11).

    The same inputs name both the Docker image (``rlmesh-sandbox-<slug>:<hash>``) and
    the venv backend's cached virtual environment, so changing any of them rebuilds
    and nothing else does.

    Attributes:
        base_image: Docker base image (default ``$RLMESH_SANDBOX_BASE_IMAGE`` or
            ``python:3.11-slim``). Needs ``python3`` with ``pip``. Ignored by the venv backend.
        rlmesh_package: What to install as rlmesh inside: ``"local"`` (default: a wheel of
            the running rlmesh, built on the fly, pure Python), a path to a ``.whl``, or a
            pip requirement. Default also from ``$RLMESH_SANDBOX_RLMESH_PACKAGE``.
        packages: Extra pip requirements (e.g. ``["gymnasium==0.29.1", "mujoco"]``).
        imports: Modules imported before ``make()`` so their envs register.
        trust_remote_code: Required for ``hf://`` sources (their ``env.py`` runs inside).
        allow_unpinned_hf: Accept an ``hf://`` revision that is not a full commit SHA.
        build_memory: Memory cap for the image build (``"8g"``, ``"auto"``, ``"off"``).
    """

    base_image: str | None = None
    rlmesh_package: str | None = None
    packages: Sequence[str] | None = None
    imports: Sequence[str] | None = None
    trust_remote_code: bool = False
    allow_unpinned_hf: bool = False
    build_memory: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_image", _optional_text("base_image", self.base_image))
        object.__setattr__(
            self, "rlmesh_package", _optional_text("rlmesh_package", self.rlmesh_package)
        )
        object.__setattr__(self, "packages", _strings("packages", self.packages))
        object.__setattr__(self, "imports", _strings("imports", self.imports))
        for flag in ("trust_remote_code", "allow_unpinned_hf"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.build_memory is not None and not isinstance(self.build_memory, str):
            raise TypeError(
                f"build_memory must be a str or None, got {type(self.build_memory).__name__}"
            )

    def options_set(self) -> list[str]:
        """Names of the fields that differ from their defaults."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]


_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")


@dataclass(frozen=True)
class SandboxRuntime:
    """``docker run`` options of a prebuilt sandbox (SBX-3, SBX-13, SBX-26).

    Attributes:
        gpus: ``--gpus`` value (``"all"``, ``1``, ``"device=0"``): CUDA compute.
        devices: ``--device`` values, e.g. ``["nvidia.com/gpu=all"]`` (CDI: graphics + compute).
        volumes: ``-v`` values (``"/host:/container:ro"``).
        user: ``--user`` as a uid (``os.getuid()``) or ``"uid[:gid]"``; writable bind mounts
            need it because the container runs with ``--cap-drop ALL``.
    """

    gpus: str | int | None = None
    devices: Sequence[str] | None = None
    volumes: Sequence[str] | None = None
    user: int | str | None = None

    def __post_init__(self) -> None:
        gpus = self.gpus
        if gpus is not None:
            if isinstance(gpus, bool) or not isinstance(gpus, (str, int)):
                raise TypeError(f"gpus= must be a str, an int or None, got {type(gpus).__name__}")
            if isinstance(gpus, str) and not gpus.strip():
                raise ValueError(
                    "gpus= must not be blank (use gpus='all', a count or 'device=...')"
                )
            object.__setattr__(self, "gpus", gpus.strip() if isinstance(gpus, str) else gpus)
        object.__setattr__(self, "devices", _strings("devices", self.devices))
        object.__setattr__(self, "volumes", _strings("volumes", self.volumes))
        user = self.user
        if user is not None:
            if isinstance(user, bool) or not isinstance(user, (int, str)):
                raise TypeError(
                    f"user= must be an int uid or a 'uid[:gid]' str, got {type(user).__name__}"
                )
            if isinstance(user, int) and user < 0:
                raise ValueError(f"user= must be a uid >= 0, got {user}")
            if isinstance(user, str) and not _USER.match(user.strip()):
                raise ValueError(f"user= must be 'uid[:gid]', got {user!r}")
            if isinstance(user, str):
                object.__setattr__(self, "user", user.strip())

    def flags_set(self) -> list[str]:
        """Names of the fields that are set."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]


@dataclass(frozen=True)
class SandboxInfo:
    """Where a sandbox runs (SBX-20).

    Attributes:
        requested_source: The source as given (``"gym://CartPole-v1"``).
        resolved_source: What it resolved to (``"gym://CartPole-v1"``, ``"docker://img:tag"``).
        address: The endpoint the client dialed (``tcp://127.0.0.1:P`` or ``unix:///...``).
        container_id: The Docker container id (``None`` on the venv backend).
        backend: ``"docker"`` or ``"venv"``.
    """

    requested_source: str
    resolved_source: str
    address: str
    container_id: str | None
    backend: str = "docker"


_RESERVED = {f.name for f in dataclasses.fields(SandboxBuild)} | {
    f.name for f in dataclasses.fields(SandboxRuntime)
}


def check_params(params: Mapping[str, Any]) -> None:
    """SBX-4: a param named like a build/runtime option is a mistake, not a make() kwarg."""
    for key in params:
        if key in _RESERVED:
            raise TypeError(
                f"{key!r} is a sandbox option, not an env/model parameter; pass it as "
                "build=SandboxBuild(...) or runtime=SandboxRuntime(...)"
            )


def binding_json(params: Mapping[str, Any]) -> str:
    """SBX-4: the construction binding as key-sorted JSON (``TypeError`` naming a non-JSON param)."""
    for key, value in params.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"sandbox parameter {key!r} is not JSON-serializable ({type(value).__name__}): {exc}; "
                "a sandbox receives its parameters as JSON"
            ) from None
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))
