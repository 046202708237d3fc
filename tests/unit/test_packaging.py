"""The distribution has a name of its own, and every install line in the docs installs *this* project.

The package index's ``rlmesh`` is the reference implementation; ``pip install "rlmesh[...]"``
would install that instead. This project is the distribution ``rlmesh-py`` (import ``rlmesh``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import rlmesh._build as build

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").rglob("*.md")),
    *sorted((ROOT / "examples").rglob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
]


def _pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_distribution_is_rlmesh_py_and_its_extras_refer_to_itself() -> None:
    project = _pyproject()["project"]
    assert project["name"] == build.DIST_NAME == "rlmesh-py"
    extras = project["optional-dependencies"]
    assert {"record", "view", "sandbox", "gymnasium", "ray"} <= set(extras)
    for name, reqs in extras.items():
        for req in reqs:
            assert not re.match(r"rlmesh\[", req), f"extra {name!r} pulls the reference: {req!r}"


def test_the_readme_install_line_installs_this_project_with_record_view_and_sandbox() -> None:
    text = (ROOT / "README.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("pip install "))
    assert line.startswith('pip install ".[record,view,sandbox]"')


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_tells_users_to_install_the_reference_by_mistake(doc: Path) -> None:
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        bad = re.search(r"pip install ['\"]?rlmesh(\[|['\"\s]|$)", line)
        if bad and "installs *that*" not in line and "the reference" not in line:
            pytest.fail(
                f"{doc.name}:{number} installs PyPI's rlmesh (the reference): {line.strip()}"
            )
