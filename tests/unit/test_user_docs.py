"""User docs speak to users: no internal requirement IDs (they live in tests and contributor docs).

``docs/architecture.md`` and ``docs/performance.md`` are contributor material and keep them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTOR = {"architecture.md", "performance.md"}
USER_DOCS = [
    ROOT / "README.md",
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in CONTRIBUTOR),
]
# SRV-12, CNF2-A9, AR-3..AR-9, ENVCALL-2/3, "seed 001"; not RFC-8259, UTF-8, UUIDv7 or x86-64
REQUIREMENT_ID = re.compile(
    r"\b(?!RFC-|UTF-|ISO-|SHA-)[A-Z][A-Z0-9]{1,7}-[A-Z]?\d+[a-z]?\b|\bseed 00\d\b"
)


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_carry_no_requirement_ids(doc: Path) -> None:
    fenced = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        found = None if fenced else REQUIREMENT_ID.search(line)
        assert found is None, f"{doc.name}:{number} names {found.group(0)!r}: {line.strip()}"


# "issue 26", "goal <= 3x: not met", "Earlier runs, before that change": history, not user docs
HISTORY = re.compile(r"\bissues? \d+\b|\bgoal\b[^.|]*\bnot met\b|\bearlier runs\b", re.IGNORECASE)


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_tell_no_project_history(doc: Path) -> None:
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        found = HISTORY.search(line)
        assert found is None, (
            f"{doc.name}:{number} tells history ({found.group(0)!r}): {line.strip()}"
        )
