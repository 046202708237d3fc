"""``import rlmesh`` stays light, and the leaf packages import on their own (issue 10 item 4).

Optional libraries are imported only where used (DESIGN, "Keep the layers clean"), so
importing the package must not load any of them. Each check runs in a fresh interpreter:
this process has long since imported everything.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters: kept out of make test-fast

#: Optional dependencies (extras) that ``import rlmesh`` must not load.
OPTIONAL = ("aiohttp", "av", "simplejpeg", "PIL", "docker", "torch", "jax", "jaxlib", "gymnasium")


def _fresh(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP", "RLMESH_BOOTSTRAP_JSON")
    }
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120, env=env
    )


def test_import_rlmesh_loads_no_optional_dependency() -> None:
    proc = _fresh(
        "-c", f"import sys, rlmesh; print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_import_rlmesh_leaves_the_viewer_http_backend_unloaded() -> None:
    """The viewer's HTTP backend needs aiohttp and pulls asyncio and ssl: it loads when a run asks for it."""
    code = "import sys, rlmesh; print(sorted(m for m in ('rlmesh.view._http', 'asyncio', 'ssl') if m in sys.modules))"
    proc = _fresh("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "module",
    [
        "rlmesh.spaces",
        "rlmesh.adapters",
        "rlmesh.view",
        "rlmesh.recorder",
        "rlmesh.sandbox",
        "rlmesh._cli.view_test",
    ],
)
def test_each_leaf_package_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    proc = _fresh("-c", f"import {module}")
    assert proc.returncode == 0, proc.stderr


def test_the_sandbox_entry_point_runs_as_a_module() -> None:  # SBX-12
    """``python -m rlmesh.sandbox._bootstrap`` (the container/venv entry point) imports and checks its usage."""
    proc = _fresh("-m", "rlmesh.sandbox._bootstrap")
    assert proc.returncode == 2
    assert "usage: python -m rlmesh.sandbox._bootstrap" in proc.stderr
    assert "RuntimeWarning" not in proc.stderr  # runpy: the module was not imported before it ran
