"""Build identity and workflow editions (DELTA-4..8, HS-3/HS-4).

Three independent axes describe a peer (HS-1): the *protocol generation* (the
byte contract, ``"rlmesh-py-v1"``), the *workflow edition* (the behavioural
contract, ``"2026.06"``) and *capabilities* (advisory features). This module
owns the edition rules: which spellings are valid, how offers are ordered and
intersected, and where a participant's declaration comes from.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import WorkflowEditionWarning

__all__ = [
    "PROTOCOL_GENERATION",
    "SUPPORTED_EDITIONS",
    "BuildInfo",
    "build_info",
    "current_workflow_edition",
    "edition_key",
    "resolve_declared_edition",
    "select_edition",
    "validate_edition",
]

VERSION = "0.1.0"
#: Our wire generation (HS-1). Not upstream's gRPC ``rlmesh-wire-v1``: the byte
#: contract is our own framing (docs/protocol.md), so it gets its own name.
PROTOCOL_GENERATION = "rlmesh-py-v1"
DIST_NAME = "rlmesh-py"  # the distribution (pip) name; the import package is `rlmesh`
EDITION_BASE = "2026.06"
#: Editions this build can drive, newest first (DELTA-4).
SUPPORTED_EDITIONS: tuple[str, ...] = (EDITION_BASE,)
ENV_VAR = "RLMESH_WORKFLOW_EDITION"


@dataclass(frozen=True, repr=False)
class BuildInfo:
    """Immutable build identity returned by :func:`build_info` (DELTA-4)."""

    version: str
    protocol_generation: str
    workflow_edition: str
    workflow_edition_base: str
    supported_workflow_editions: tuple[str, ...] = field(default=SUPPORTED_EDITIONS)
    build_cohort: str = "stable"
    build_source: str = "release"
    git: str | None = None

    def __repr__(self) -> str:
        def q(v: str | None) -> str:
            return "None" if v is None else f'"{v}"'

        return (
            f"BuildInfo(version={q(self.version)}, protocol_generation={q(self.protocol_generation)}, "
            f"workflow_edition={q(self.workflow_edition)}, "
            f"workflow_edition_base={q(self.workflow_edition_base)}, "
            f"build_cohort={q(self.build_cohort)}, build_source={q(self.build_source)}, git={q(self.git)})"
        )


_BUILD = BuildInfo(
    version=VERSION,
    protocol_generation=PROTOCOL_GENERATION,
    workflow_edition=EDITION_BASE,
    workflow_edition_base=EDITION_BASE,
)


def build_info() -> BuildInfo:
    """This build's identity (DELTA-4)."""
    return _BUILD


def current_workflow_edition() -> str:
    """The bare edition base this build implements, e.g. ``"2026.06"`` (DELTA-5)."""
    return EDITION_BASE


def edition_key(name: str) -> tuple[str, int, str]:
    """Ordering key (HS-3): base, then suffixed cohort above bare, then the suffix."""
    base, sep, suffix = name.strip().partition("-")
    return (base, 1 if sep else 0, suffix)


def validate_edition(value: str) -> str:
    """Validate a declared edition (DELTA-6) and return it trimmed.

    Accepted: the bare base of a supported edition, or a cohort spelling of it
    (``"2026.06-0.1.0-rc.5"``).

    Raises:
        ValueError: the edition cannot be driven by this build.
    """
    if not isinstance(value, str):
        raise TypeError(f"workflow_edition must be a str, got {type(value).__name__}")
    v = value.strip()
    base = v.partition("-")[0]
    if v and base in SUPPORTED_EDITIONS and (v == base or len(v) > len(base) + 1):
        return v
    raise ValueError(
        f'runtime cannot drive workflow edition "{value}"; this build implements '
        f"[{', '.join(chr(34) + e + chr(34) for e in SUPPORTED_EDITIONS)}]"
    )


def offer_for(declared: str | None) -> tuple[list[str], str]:
    """The (supported list, preferred) pair a participant advertises (DELTA-11).

    A declaration is a ceiling: a peer declaring ``2026.06`` offers just that;
    a cohort declaration offers the cohort and its sealed base.
    """
    if declared is None:
        return list(SUPPORTED_EDITIONS), SUPPORTED_EDITIONS[0]
    base = declared.partition("-")[0]
    offer = [declared] if declared == base else [declared, base]
    return offer, declared


def select_edition(*offers: Sequence[str], ceilings: Iterable[str | None] = ()) -> str | None:
    """Highest edition present in every offer and at or below every ceiling (HS-4, DELTA-6).

    A cohort ceiling admits its sealed base (a cohort orders above its base).
    Returns ``None`` when nothing is mutual.

    >>> select_edition(["2026.06"], ["2026.06", "2025.12"])
    '2026.06'
    """
    common: set[str] | None = None
    for offer in offers:
        names = {o.strip() for o in offer if o and o.strip()}
        common = names if common is None else common & names
    if not common:
        return None
    for ceiling in ceilings:
        if ceiling:
            ck = edition_key(ceiling)
            common = {c for c in common if edition_key(c) <= ck}
    if not common:
        return None
    return max(common, key=edition_key)


# -- where a declaration comes from (DELTA-7) ---------------------------------------------

_UNSET = object()
_pyproject_cache: dict[str, str | None] = {}
_warned = False


def _pyproject_edition(cwd: str) -> str | None:
    if cwd in _pyproject_cache:
        return _pyproject_cache[cwd]
    found: str | None = None
    for directory in [Path(cwd), *Path(cwd).parents]:
        candidate = directory / "pyproject.toml"
        if not candidate.is_file():
            continue
        try:
            text = candidate.read_text(encoding="utf-8")
        except OSError:
            break
        found = _scan_tool_rlmesh(text)
        break
    _pyproject_cache[cwd] = found
    return found


def _scan_tool_rlmesh(text: str) -> str | None:
    in_table = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            in_table = line.replace(" ", "") == "[tool.rlmesh]"
            continue
        if in_table:
            key, sep, value = line.partition("=")
            if sep and key.strip() == "workflow_edition":
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                    return value[1:-1]
                return None
    return None


def resolve_declared_edition(
    explicit: str | None = None,
    *,
    served: str | None = None,
    class_attr: str | None = None,
    warn: bool = False,
    who: str = "this participant",
    hint: str | None = None,
) -> str | None:
    """Resolve a participant's declared edition through the DELTA-7 rungs.

    Args:
        explicit: The call keyword (rung 1).
        served: ``ServeOptions.workflow_edition`` / ``--workflow-edition`` (rung 3).
        class_attr: ``workflow_edition`` on an EnvFactory/Model subclass (rung 4).
        warn: Emit :class:`WorkflowEditionWarning` (once per process) when nothing
            is declared (DELTA-8).
        who: Named in the warning.
        hint: How this participant declares an edition (named first in the warning).

    Returns:
        The validated declaration, or ``None`` to float to the newest edition.
    """
    global _warned
    if explicit is not None and explicit.strip():
        return validate_edition(explicit)
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return validate_edition(env) if env.strip() else None  # empty: stop, no warning
    for rung in (served, class_attr):
        if rung is not None and rung.strip():
            return validate_edition(rung)
    from_file = _pyproject_edition(os.getcwd())
    if from_file is not None:
        return validate_edition(from_file)
    if warn and not _warned:
        _warned = True
        how = hint or (
            f'workflow_edition="{EDITION_BASE}" (ServeOptions, or a class attribute on your '
            f"EnvFactory/Model), --workflow-edition {EDITION_BASE} on the command line"
        )
        warnings.warn(
            f"{who} declares no workflow edition and floats to {SUPPORTED_EDITIONS[0]!r}, the newest "
            "this rlmesh implements. A workflow edition is the dated set of behaviours (how resets, "
            "autoreset and info work) that your env or model was written against: nothing changes "
            "today, but a later rlmesh may default to a newer edition, and a pinned one keeps "
            f"today's behaviour. Pin it with {how}, or `[tool.rlmesh] workflow_edition` in "
            f"pyproject.toml, or silence this with {ENV_VAR}=''",
            WorkflowEditionWarning,
            stacklevel=_outside_stacklevel(),
        )
    return None


def _outside_stacklevel() -> int:
    """Stack level of the first frame outside the rlmesh package (DELTA-8)."""
    level = 1
    frame = sys._getframe(1)
    pkg = str(Path(__file__).parent)
    while frame is not None and frame.f_code.co_filename.startswith(pkg):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
