"""Pre-flight checks of describe envelopes and image labels (AUTH-22, DELTA-54).

``check_labels`` inspects the labels baked into an image (``dev.rlmesh.describe``
and the optional ``dev.rlmesh.package``); ``check_target`` describes a class
and checks the result. Each finding lands in one bucket of a
:class:`CheckReport`: ``failed`` (the image or class will not probe as
runnable), ``warnings``, ``not_checked`` (nothing to decide from), ``passed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .. import adapters
from .._build import validate_edition
from ..adapters._roles import is_sanctioned
from ._describe import describe

__all__ = [
    "DESCRIBE_LABEL",
    "PACKAGE_LABEL",
    "CheckReport",
    "check_envelope",
    "check_labels",
    "check_target",
]

DESCRIBE_LABEL = "dev.rlmesh.describe"
PACKAGE_LABEL = "dev.rlmesh.package"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: env_spec badges that mean "this host lacks the GPU/driver/dependency", not "the env is broken".
_ENVIRONMENTAL_ERRORS = ("ImportError", "ModuleNotFoundError", "DependencyMissing", "OSError")
_ENVIRONMENTAL_WORDS = ("cuda", "gpu", "driver", "display", "egl", "no module named")


@dataclass
class CheckReport:
    """The outcome of a check: four lists of human-readable findings."""

    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """``True`` when nothing failed."""
        return not self.failed

    def to_dict(self) -> dict[str, list[str]]:
        """``{"failed", "warnings", "not_checked", "passed"}``."""
        return {
            "failed": list(self.failed),
            "warnings": list(self.warnings),
            "not_checked": list(self.not_checked),
            "passed": list(self.passed),
        }

    def render(self, subject: str) -> str:
        """Text report: one line per finding, then ``"<ok|FAIL>: <subject>: N failed, ..."``."""
        lines = [f"FAIL: {m}" for m in self.failed]
        lines += [f"warn: {m}" for m in self.warnings]
        lines += [f"not checked: {m}" for m in self.not_checked]
        lines += [f"ok: {m}" for m in self.passed]
        status = "ok" if self.ok else "FAIL"
        lines.append(
            f"{status}: {subject}: {len(self.failed)} failed, {len(self.warnings)} warnings, "
            f"{len(self.not_checked)} not checked"
        )
        return "\n".join(lines)


def _environmental(badge: Mapping[str, Any]) -> bool:
    if badge.get("error_type") in _ENVIRONMENTAL_ERRORS:
        return True
    text = str(badge.get("error", "")).lower()
    return any(w in text for w in _ENVIRONMENTAL_WORDS)


def _is_badge(x: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(x, Mapping) and "error" in x


def check_envelope(doc: Any, report: CheckReport, *, baked: bool) -> None:
    """Check one parsed describe envelope into ``report`` (DELTA-54 rules)."""
    if not isinstance(doc, Mapping):
        report.failed.append("describe envelope is not a JSON object")
        return
    if doc.get("schema_version") != 1:
        report.failed.append(f"schema_version must be 1, got {doc.get('schema_version')!r}")
        return
    kind = doc.get("kind")
    if kind not in ("env", "model"):
        report.failed.append(f"kind must be 'env' or 'model', got {kind!r}")
        return
    report.passed.append(f"describe envelope (schema_version 1, kind {kind})")
    if kind == "env":
        spec = doc.get("env_spec")
        if _is_badge(spec):
            msg = f"env_spec could not be read: {spec['error']}"
            if _environmental(spec):
                (report.failed if baked else report.not_checked).append(msg)
            else:
                report.warnings.append(msg)
        tags = doc.get("env_tags")
        if tags is None:
            report.failed.append(
                "the env publishes no adapter tags; set EnvFactory.tags = EnvTags(...)"
            )
        elif _is_badge(tags):
            report.warnings.append(f"env_tags: {tags['error']}")
        else:
            _normalize(report, "env_tags", tags, "EnvTags")
    else:
        spec = doc.get("model_spec")
        if spec is None:
            report.warnings.append("the model declares no class-level spec; it will run un-adapted")
        elif _is_badge(spec):
            report.warnings.append(f"model_spec: {spec['error']}")
        else:
            _normalize(report, "model_spec", spec, "ModelSpec")
    variants = doc.get("variants") or {}
    for key in ("variations_error", "catalog_error"):
        if key in variants:
            report.warnings.append(f"variants.{key}: {variants[key]}")
    for entry in variants.get("catalog", []) if isinstance(variants, Mapping) else []:
        if isinstance(entry, Mapping) and "error" in entry:
            report.warnings.append(f"variant {entry.get('id')!r}: {entry['error']}")
    runtime = doc.get("runtime")
    if not isinstance(runtime, Mapping) or "supported_workflow_editions" not in runtime:
        report.not_checked.append("workflow editions: the envelope carries none")
    elif "workflow_edition_error" in runtime:
        report.failed.append(f"workflow edition: {runtime['workflow_edition_error']}")
    else:
        try:
            validate_edition(str(runtime.get("preferred_workflow_edition", "")))
            report.passed.append(f"workflow edition {runtime.get('preferred_workflow_edition')}")
        except ValueError as exc:
            report.failed.append(f"workflow edition: {exc}")


def _normalize(report: CheckReport, key: str, value: Any, cls_name: str) -> None:
    cls = getattr(adapters, cls_name, None)
    if cls is None:
        report.not_checked.append(f"{key}: rlmesh.adapters is unavailable")
        return
    try:
        cls.from_dict(value)
    except Exception as exc:
        report.failed.append(f"{key} does not parse as {cls_name}: {exc}")
    else:
        report.passed.append(f"{key} parse as {cls_name}")
        _ad_hoc_roles(report, key, value)


def _ad_hoc_roles(report: CheckReport, key: str, value: Any) -> None:
    """DELTA-54/61: an unregistered role outside ``x/`` parses, but only matches its exact string: warn."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            role = node.get("role")
            if isinstance(role, str) and not is_sanctioned(role) and role not in found:
                found.append(role)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(value)
    for role in found:
        report.warnings.append(
            f'{key} declares ad-hoc role "{role}": an ad-hoc role matches only on the exact string, so a peer '
            'that does not declare it resolves to a fill -- use a registered role, or the "x/" namespace to '
            "mark it intentionally non-standard"
        )


def _check_package(raw: str, report: CheckReport) -> None:
    try:
        pkg = json.loads(raw)
    except ValueError as exc:
        report.failed.append(f"{PACKAGE_LABEL} is not valid JSON: {exc}")
        return
    if not isinstance(pkg, Mapping):
        report.failed.append(f"{PACKAGE_LABEL} must be a JSON object")
        return
    if pkg.get("schemaVersion") != 1:
        report.failed.append(
            f"{PACKAGE_LABEL} schemaVersion must be 1, got {pkg.get('schemaVersion')!r}"
        )
        return
    defaults = 0
    for i, cp in enumerate(pkg.get("checkpoints") or []):
        if not isinstance(cp, Mapping):
            report.failed.append(f"{PACKAGE_LABEL} checkpoint {i} must be an object")
            continue
        name = cp.get("name")
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            report.failed.append(
                f"{PACKAGE_LABEL} checkpoint name {name!r} is not a DNS label (a-z, 0-9, '-', <= 63)"
            )
        if not cp.get("uri"):
            report.failed.append(f"{PACKAGE_LABEL} checkpoint {name!r} has no uri")
        defaults += bool(cp.get("default"))
    if defaults > 1:
        report.warnings.append(f"{PACKAGE_LABEL} marks {defaults} checkpoints as default")
    report.passed.append(f"{PACKAGE_LABEL} (schemaVersion 1)")


def check_labels(labels: Mapping[str, Any]) -> CheckReport:
    """Check an image's labels: the baked describe envelope and the package label."""
    report = CheckReport()
    raw = labels.get(DESCRIBE_LABEL)
    if not raw:
        report.not_checked.append(f"no {DESCRIBE_LABEL} label")
    else:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            report.failed.append(f"{DESCRIBE_LABEL} is not valid JSON: {exc}")
        else:
            check_envelope(doc, report, baked=True)
    if labels.get(PACKAGE_LABEL):
        _check_package(str(labels[PACKAGE_LABEL]), report)
    return report


def check_target(target: object, *, kind: str | None = None) -> CheckReport:
    """Describe ``target`` (a class, instance or ``"module:Class"``) and check the envelope."""
    report = CheckReport()
    try:
        doc = describe(target, kind=kind)
    except Exception as exc:
        report.failed.append(f"describe failed: {type(exc).__name__}: {exc}")
        return report
    check_envelope(doc, report, baked=False)
    return report
