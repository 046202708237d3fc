"""The public names of ``../shared/spec/api-surface.md`` exist, module by module (issue 10).

Each ``### A.N `module` (...)`` section's table lists names the module must provide. For
the root package, ``rlmesh.__all__`` is pinned: it holds exactly the listed names plus the
additions this project documents (:data:`ROOT_ADDITIONS`), so a name cannot appear or
vanish from the public surface unnoticed.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from conftest import REQUIRE_ALL

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "api-surface.md"

#: rlmesh's own public names beyond the reference's (DESIGN.md "Decisions").
ROOT_ADDITIONS = {"SandboxInfo", "Workers", "WorkerPool"}

_CLASSES = ["EnvFactory", "Model", "RemoteEnv", "RemoteModel", "RemoteVectorEnv", "SandboxEnv", "SandboxVectorEnv",
            "SandboxBuild", "SandboxInfo", "SandboxModel", "SandboxRuntime"]  # fmt: skip
#: Sections the spec writes as prose rather than a table (A.3, A.4, A.9, A.10).
PROSE = {
    "rlmesh.torch": [
        *_CLASSES,
        "TorchValue",
        "as_tensor",
        "from_tensor",
        "ensure_available",
        "space_from_spec",
    ],
    "rlmesh.jax": [
        *_CLASSES,
        "JaxValue",
        "asarray",
        "from_array",
        "ensure_available",
        "space_from_spec",
    ],
    "rlmesh.specs": ["EnvContract", "SpaceSpec"],
    "rlmesh.recorder": [
        "EpisodeRecord",
        "MediaRef",
        "Recorder",
        "ResultSet",
        "SCHEMA",
        "WorkloadRecord",
    ],
}

_SECTION = re.compile(r"^### A\.\d+ `([\w.]+)`", re.M)
_ROW = re.compile(r"^\| `([^`]+)` \|", re.M)


def _sections() -> dict[str, list[str]]:
    if not SPEC.exists():
        if REQUIRE_ALL:
            pytest.fail(f"{SPEC} is missing (CI lays ../shared beside the checkout)", pytrace=False)
        pytest.skip(f"{SPEC} is not beside this checkout")
    text = SPEC.read_text()
    marks = list(_SECTION.finditer(text))
    out: dict[str, list[str]] = {}
    for i, m in enumerate(marks):
        body = text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        out[m.group(1)] = _ROW.findall(body)
    return out


def test_the_spec_lists_the_modules_we_check() -> None:
    sections = _sections()
    assert {"rlmesh", "rlmesh.numpy"} <= set(sections)
    assert len(sections["rlmesh"]) >= 50


@pytest.mark.parametrize(
    "module",
    ["rlmesh", "rlmesh.numpy", "rlmesh.torch", "rlmesh.jax", "rlmesh.spaces", "rlmesh.types", "rlmesh.adapters",
     "rlmesh.params", "rlmesh.specs", "rlmesh.recorder"],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore:rlmesh.__build__ is deprecated:DeprecationWarning")
def test_every_listed_name_exists(module: str) -> None:
    """Importable without the optional framework (torch/jax flavours check on use)."""
    names = _sections().get(module) or PROSE[module]
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert missing == [], f"{module} lacks {missing}"


@pytest.mark.parametrize("module", ["rlmesh.numpy", "rlmesh.torch", "rlmesh.jax"])
def test_flavours_export_the_same_sixteen_names(module: str) -> None:
    names = set(_sections().get(module) or PROSE[module])
    assert len(names) == 16 and set(importlib.import_module(module).__all__) == names


def test_root_all_is_pinned_to_the_spec() -> None:
    import rlmesh

    listed = set(_sections()["rlmesh"])
    exported = set(rlmesh.__all__)
    assert sorted(listed - exported) == [], "names the spec lists but rlmesh.__all__ lacks"
    assert sorted(exported - listed - ROOT_ADDITIONS) == [], (
        "names in rlmesh.__all__ the spec does not list"
    )
