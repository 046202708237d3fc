"""What a sandbox source string names: a gym id or an hf repo to build, or an image to run (SBX-1, SBX-2).

``gym://ID`` and ``hf://org/repo[@rev][:suite[/task]]`` build from source; ``docker://IMG``
and ``image://IMG`` run a prebuilt image. Bare strings are classified by shape: a
``-v<N>`` suffix is a gym id (Docker is never asked); an image-shaped ref (a tag or a
digest) is looked up locally, then pulled; a bare tagless name is an image only if
one exists locally (never pulled, never silently built). Every resolution is
announced on stderr.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["HfRef", "Source", "classify_env_source", "classify_model_source", "parse_hf"]

_GYM_ID = re.compile(r"-v\d+$")
_HF_REV_BAD = re.compile(r"[\s*?\[\]^~:\\]|\.\.|@\{")
_SCHEMES = ("gym", "hf", "docker", "image")


@dataclass(frozen=True)
class Source:
    """A classified source.

    Attributes:
        requested: The string as given.
        kind: ``"gym"``, ``"hf"`` or ``"image"``.
        value: The env id, the hf reference (without scheme) or the image reference.
    """

    requested: str
    kind: str
    value: str

    @property
    def build(self) -> bool:
        """Whether this source is built from source (gym/hf) rather than run from an image."""
        return self.kind in ("gym", "hf")

    @property
    def resolved(self) -> str:
        return f"docker://{self.value}" if self.kind == "image" else f"{self.kind}://{self.value}"


@dataclass(frozen=True)
class HfRef:
    """``hf://org/repo[@rev][:suite[/task]]`` split into its parts."""

    org: str
    repo: str
    revision: str | None
    suite: str | None
    task: str | None

    @property
    def slug(self) -> str:
        return "-".join(p for p in (self.org, self.repo, self.suite, self.task) if p)


class ImageProbe(Protocol):
    """What classification needs from Docker (the real one is ``_docker``)."""

    def cli_available(self) -> bool: ...

    def image_exists(self, ref: str) -> bool: ...

    def pull(self, ref: str) -> None: ...


def _announce(requested: str, what: str) -> None:
    print(f"rlmesh: resolved {requested!r} -> {what}", file=sys.stderr, flush=True)


def _image_shaped(text: str) -> bool:
    return "@sha256:" in text or ":" in text.rsplit("/", 1)[-1]


def parse_hf(value: str) -> HfRef:
    """Split an ``hf://`` reference (without the scheme); ``ValueError`` on a malformed one."""
    head, _, selector = value.partition(":")
    repo_part, _, revision = head.partition("@")
    parts = repo_part.split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts):
        raise ValueError(
            f"hf source must look like hf://org/repo[@revision][:suite[/task]], got 'hf://{value}'"
        )
    if revision and (revision.startswith("-") or _HF_REV_BAD.search(revision)):
        raise ValueError(f"hf revision {revision!r} is not a plain branch, tag or commit name")
    suite, _, task = selector.partition("/")
    return HfRef(parts[0], parts[1], revision or None, suite or None, task or None)


def classify_env_source(source: object, probe: Callable[[], ImageProbe]) -> Source:
    """SBX-1: classify an env source. ``probe()`` gives the Docker lookups (called only when needed).

    Raises:
        TypeError: ``source`` is not a str.
        ValueError: empty, unsupported scheme, an image source without a reference, or a
            bare name that is neither a gym id nor a local image.
        RuntimeError: an image-shaped bare name and no Docker CLI to look it up.
    """
    if not isinstance(source, str):
        raise TypeError(f"sandbox source must be a str, got {type(source).__name__}")
    text = source.strip()
    if not text:
        raise ValueError(
            "sandbox source must not be empty (e.g. 'gym://CartPole-v1' or 'docker://my/image:tag')"
        )
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme not in _SCHEMES:
            raise ValueError(
                f"unsupported sandbox source scheme {scheme + '://'!r} in {source!r}; use gym://, hf://, docker:// or image://"
            )
        if not rest.strip():
            if scheme in ("docker", "image"):
                raise ValueError(
                    f"{source!r}: an image source must include an image tag, e.g. docker://repo/name:tag"
                )
            raise ValueError(f"{source!r} names nothing after {scheme}://")
        rest = rest.strip()
        if scheme == "hf":
            parse_hf(rest)
            out = Source(source, "hf", rest)
        elif scheme == "gym":
            out = Source(source, "gym", rest)
        else:
            out = Source(source, "image", rest)
        _announce(source, ("build" if out.build else "prebuilt") + f" ({out.resolved})")
        return out
    if _GYM_ID.search(text):  # gym-versioned names never probe Docker
        out = Source(source, "gym", text)
        _announce(source, f"build ({out.resolved})")
        return out
    docker = probe()
    explicit = f"write 'gym://{text}' to build a gym env or 'docker://{text}' to run an image"
    if _image_shaped(text):
        if not docker.cli_available():
            raise RuntimeError(
                f"{source!r} looks like a Docker image but the Docker CLI is not on PATH; install Docker"
            )
        if not docker.image_exists(text):
            print(f"rlmesh: pulling image {text!r} ...", file=sys.stderr, flush=True)
            try:
                docker.pull(text)
            except Exception as exc:
                tail = "\n".join(str(exc).strip().splitlines()[-5:])
                raise ValueError(
                    f"{source!r} is neither a local image nor pullable; {explicit}. Pull error:\n{tail}"
                ) from None
        out = Source(source, "image", text)
        _announce(source, f"prebuilt ({out.resolved})")
        return out
    if docker.cli_available():
        try:
            found = docker.image_exists(text)
        except Exception:
            found = False
        if found:
            out = Source(source, "image", text)
            _announce(source, f"prebuilt ({out.resolved}, local image)")
            return out
        raise ValueError(
            f"{source!r} is not a gym id (no -v<N> suffix) and no local image has that name; {explicit}"
        )
    raise ValueError(
        f"{source!r} is not a gym id (no -v<N> suffix) and the Docker CLI is not on PATH to look for an image; {explicit}"
    )


def classify_model_source(source: object) -> Source:
    """SBX-2: a model sandbox always runs a prebuilt image; ``image://``/``docker://`` are stripped."""
    if not isinstance(source, str):
        raise TypeError(
            f"SandboxModel source must be a str image reference, got {type(source).__name__}"
        )
    text = source.strip()
    for prefix in ("image://", "docker://"):
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
            break
    if not text:
        raise ValueError(
            f"{source!r}: a SandboxModel source must include an image tag, e.g. 'docker://my/policy:latest'"
        )
    if "://" in text:
        raise ValueError(
            f"SandboxModel source must be an image reference (docker://...), got {source!r}"
        )
    if _GYM_ID.search(text) and not _image_shaped(text):
        raise ValueError(
            f"{source!r} looks like a gym env id, not a model image; SandboxModel runs a prebuilt image "
            "(docker://repo/policy:tag). For an env use SandboxEnv."
        )
    return Source(source, "image", text)
