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


def readme_install_line() -> str:
    """The README's install command (the first ``pip install`` line of its Install section)."""
    text = (ROOT / "README.md").read_text()
    return next(line for line in text.splitlines() if line.startswith("pip install "))


def _closure(extras: dict[str, list[str]], names: set[str]) -> set[str]:
    """The extras ``names`` pull in, following ``rlmesh-py[...]`` self-references."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras.get(name, []):
            inner = re.match(r"rlmesh-py\[([^\]]+)\]", req)
            if inner:
                todo.extend(x.strip() for x in inner.group(1).split(","))
    return seen


def test_the_readme_install_line_installs_this_project_with_what_its_commands_need() -> None:
    line = readme_install_line()
    found = re.match(r'pip install "\.\[([^\]]+)\]"', line)
    assert found, f"the README's install line should install this clone with extras: {line!r}"
    extras = _pyproject()["project"]["optional-dependencies"]
    pulled = _closure(extras, {x.strip() for x in found.group(1).split(",")})
    # `rlmesh serve CartPole-v1`, the viewer, the recorder and sandboxes follow in the README
    assert {"gymnasium", "cli", "view", "record", "sandbox"} <= pulled
    requirements = " ".join(req for name in pulled for req in extras[name])
    assert "gymnasium" in requirements


def test_the_readme_names_every_extra_with_a_phrase() -> None:
    text = (ROOT / "README.md").read_text()
    rows = {
        name.strip("` ")
        for row in re.findall(r"^\| (`[^|]+) \| [^|]+\|$", text, re.MULTILINE)
        for name in row.split(",")
    }
    missing = set(_pyproject()["project"]["optional-dependencies"]) - rows
    assert not missing, f"README's extras table lacks {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_tells_users_to_install_the_reference_by_mistake(doc: Path) -> None:
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        bad = re.search(r"pip install ['\"]?rlmesh(\[|['\"\s]|$)", line)
        if bad and "installs *that*" not in line and "the reference" not in line:
            pytest.fail(
                f"{doc.name}:{number} installs PyPI's rlmesh (the reference): {line.strip()}"
            )
