"""The effective build of a sandbox: what gets installed, its content hash, the Dockerfile (SBX-6..9).

One :class:`BuildPlan` names both backends' artefacts: the Docker image tag
``rlmesh-sandbox-<slug>:<hash12>`` and the venv directory ``<slug>-<hash12>``. The hash
covers the schema version, the resolved source (with the hf commit), the base (the
image, or for a venv the interpreter), the rlmesh package (with the wheel's sha256),
the extra packages and the imports -- never run-time parameters (make kwargs,
``num_envs``, vectorization mode), so those never rebuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._hf import materialize
from ._options import SandboxBuild
from ._source import Source, parse_hf
from ._wheel import build_wheel

__all__ = ["DEFAULT_BASE_IMAGE", "SCHEMA_VERSION", "BuildPlan", "make_plan", "sanitize_slug"]

SCHEMA_VERSION = 1
DEFAULT_BASE_IMAGE = "python:3.11-slim"
CONTAINER_PORT = 50051
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def sanitize_slug(text: str) -> str:
    """A Docker-repository-safe slug of an env id (``ALE/Pong-v5`` -> ``ale-pong-v5``)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    slug = re.sub(r"[-._]{2,}", "-", slug)
    return slug[:64].strip("-._") or "env"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _req_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


@dataclass
class BuildPlan:
    """Everything a build needs; :meth:`identity` is what the hash covers.

    Attributes:
        source: The classified source (gym or hf).
        base_image: Docker ``FROM`` image.
        package: ``"local"``, a ``.whl`` path or a pip requirement for rlmesh itself.
        packages: Extra pip requirements.
        imports: Modules imported before ``make()``.
        wheel: The wheel file to inject (``local`` or a ``.whl``), else ``None``.
        wheel_sha256: Its sha256.
        hf_commit: The resolved commit of an hf source.
        source_dir: The materialized hf source tree.
    """

    source: Source
    base_image: str
    package: str
    packages: tuple[str, ...]
    imports: tuple[str, ...]
    wheel: Path | None = None
    wheel_sha256: str | None = None
    hf_commit: str | None = None
    source_dir: Path | None = None
    build_memory: str | None = None
    local_files: dict[str, str] = field(default_factory=dict)
    _digests: dict[str, str] = field(default_factory=dict, repr=False)

    # -- identity ---------------------------------------------------------------------------

    def resolved_source(self) -> str:
        if self.source.kind == "hf" and self.hf_commit:
            head = self.source.value.split(":", 1)
            repo = head[0].split("@", 1)[0]
            sel = f":{head[1]}" if len(head) > 1 else ""
            return f"hf://{repo}@{self.hf_commit}{sel}"
        return self.source.resolved

    def identity(self, backend: str) -> dict[str, Any]:
        base = (
            self.base_image
            if backend == "docker"
            else f"venv:{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}:{sys.base_prefix}"
        )
        return {
            "schema": SCHEMA_VERSION,
            "source": self.resolved_source(),
            "base": base,
            "package": {"ref": self.package, "sha256": self.wheel_sha256},
            "packages": list(self.packages),
            "local_files": dict(
                sorted(self.local_files.items())
            ),  # a rebuilt wheel of the same name rebuilds
            "imports": list(self.imports),
        }

    def digest(self, backend: str) -> str:
        if backend not in self._digests:
            blob = json.dumps(
                self.identity(backend), sort_keys=True, separators=(",", ":")
            ).encode()
            self._digests[backend] = hashlib.sha256(blob).hexdigest()
        return self._digests[backend]

    @property
    def slug(self) -> str:
        if self.source.kind == "hf":
            return sanitize_slug(parse_hf(self.source.value).slug)
        return sanitize_slug(self.source.value)

    @property
    def image_tag(self) -> str:
        return f"rlmesh-sandbox-{self.slug}:{self.digest('docker')[:12]}"

    @property
    def venv_name(self) -> str:
        return f"{self.slug}-{self.digest('venv')[:12]}"

    # -- what to install --------------------------------------------------------------------

    def requirements(self, package_ref: str, *, in_image: bool = False) -> list[str]:
        """pip arguments: rlmesh (``package_ref``), gymnasium unless pinned by the user, the extras.

        ``in_image``: local package files are referred to by their copy in the build context.
        """
        names = {_req_name(p) for p in self.packages if p not in self.local_files}
        reqs = [package_ref]
        if "gymnasium" not in names:
            reqs.append("gymnasium")
        for p in self.packages:
            reqs.append(
                f"/opt/rlmesh/packages/{Path(p).name}" if in_image and p in self.local_files else p
            )
        return reqs

    def bootstrap_spec(
        self,
        *,
        kwargs: dict[str, Any],
        num_envs: int,
        vectorization_mode: str | None,
        source_dir: str | None,
    ) -> dict[str, Any]:
        """SBX-12: the ``RLMESH_BOOTSTRAP_JSON`` payload."""
        spec: dict[str, Any] = {
            "imports": list(self.imports),
            "kwargs": kwargs,
            "num_envs": num_envs,
            "vectorization_mode": vectorization_mode,
        }
        if self.source.kind == "hf":
            ref = parse_hf(self.source.value)
            spec.update(kind="hf", source_subdir=source_dir, suite=ref.suite, task=ref.task)
        else:
            spec.update(kind="gym", env_id=self.source.value)
        return {"spec": spec}

    # -- Docker -----------------------------------------------------------------------------

    def dockerfile(self, *, with_wheel: bool, with_certs: bool) -> str:
        """SBX-8: the generated Dockerfile (one RUN, every argument shell-quoted)."""
        ref = (
            f"/opt/rlmesh/packages/{self.wheel.name}" if with_wheel and self.wheel else self.package
        )
        pip = ["python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check"]
        steps = [shlex.join([*pip, *self.requirements(ref, in_image=True)])]
        if self.source.kind == "hf":
            steps.append(
                "if [ -f /opt/rlmesh/source/requirements.txt ]; then "
                + shlex.join([*pip, "-r", "/opt/rlmesh/source/requirements.txt"])
                + "; fi"
            )
        script = " && ".join(steps)
        if with_certs:
            ca = "/opt/rlmesh/certs/ca.crt"
            script = f"export PIP_CERT={ca} SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} && {script}"
        lines = [
            f"FROM {self.base_image}",
            f"ENV RLMESH_PORT={CONTAINER_PORT} PYTHONUNBUFFERED=1 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore",
            "WORKDIR /opt/rlmesh",
        ]
        if self.source.kind == "hf":
            lines.append("COPY source /opt/rlmesh/source")
        if (with_wheel and self.wheel) or self.local_files:
            lines.append("COPY packages /opt/rlmesh/packages")
        if with_certs:
            lines.append("COPY certs /opt/rlmesh/certs")
        lines += [
            f"RUN sh -c {shlex.quote(script)}",
            f"EXPOSE {CONTAINER_PORT}",
            'ENTRYPOINT ["python3", "-m", "rlmesh.sandbox._bootstrap"]',
            "",
        ]
        return "\n".join(lines)

    def write_context(self, ctx: Path) -> None:
        """Fill a Docker build context: Dockerfile, the wheel, the host CA bundle, the hf tree."""
        with_wheel = self.wheel is not None
        if with_wheel or self.local_files:
            (ctx / "packages").mkdir()
        if self.wheel is not None:
            shutil.copy2(self.wheel, ctx / "packages" / self.wheel.name)
        for path in self.local_files:
            shutil.copy2(path, ctx / "packages" / Path(path).name)
        ca = host_ca_bundle()
        if ca is not None:
            (ctx / "certs").mkdir()
            shutil.copyfile(ca, ctx / "certs" / "ca.crt")
        if self.source_dir is not None:
            shutil.copytree(self.source_dir, ctx / "source")
        (ctx / "Dockerfile").write_text(
            self.dockerfile(with_wheel=with_wheel, with_certs=ca is not None)
        )


def host_ca_bundle() -> Path | None:
    """The CA bundle pip on this host trusts (a TLS-intercepting proxy needs it inside the build too)."""
    for var in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def _env_or(value: str | None, var: str, default: str) -> str:
    if value is not None:
        return value
    text = os.environ.get(var, "").strip()
    if "\n" in text:
        raise ValueError(f"${var} must be one line")
    return text or default


def make_plan(source: Source, build: SandboxBuild, workdir: Path) -> BuildPlan:
    """SBX-6/9: resolve defaults, materialize the wheel (into ``workdir``) and an hf source tree."""
    base = _env_or(build.base_image, "RLMESH_SANDBOX_BASE_IMAGE", DEFAULT_BASE_IMAGE)
    package = _env_or(build.rlmesh_package, "RLMESH_SANDBOX_RLMESH_PACKAGE", "local")
    plan = BuildPlan(
        source=source,
        base_image=base,
        package=package,
        packages=tuple(build.packages or ()),
        imports=tuple(build.imports or ()),
        build_memory=build.build_memory,
    )
    if package == "local":
        plan.wheel = build_wheel(workdir / "wheel")
    elif package.endswith(".whl") and "://" not in package:
        path = Path(package).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"rlmesh_package wheel {package!r} does not exist")
        plan.wheel = path
    if plan.wheel is not None:
        plan.wheel_sha256 = _sha256_file(plan.wheel)
    for (
        req
    ) in plan.packages:  # local wheels / sdists: copied into an image build, hashed by content
        if (
            "://" not in req
            and (os.sep in req or req.endswith((".whl", ".tar.gz", ".zip")))
            and Path(req).expanduser().is_file()
        ):
            plan.local_files[req] = _sha256_file(Path(req).expanduser())
    if source.kind == "hf":
        if not build.trust_remote_code:
            raise ValueError(
                f"{source.requested!r} runs the repository's env.py; pass build=SandboxBuild(trust_remote_code=True) "
                "if you trust it"
            )
        plan.hf_commit, plan.source_dir = materialize(
            source.value, workdir / "source", allow_unpinned=build.allow_unpinned_hf
        )
    return plan


def is_full_sha(rev: str | None) -> bool:
    return bool(rev) and bool(_HEX40.match(rev or ""))
