"""The eval drive talks to its three protocols only (issue 23 item 1).

Parsed with ``ast`` (nothing is imported): no module outside ``eval/_session.py`` reads
a private ``Session`` attribute (one allowed use, named with its reason); the drive's
modules call only the :class:`rlmesh.models._route.Route` protocol's members on a route
and never tell route kinds apart; the viewer reads nothing private of a session.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlmesh.models._route import Route
from srctree import parse, walk

SRC = Path(__file__).resolve().parents[3] / "src" / "rlmesh"
DRIVE = (
    "_session.py",
    "_drive.py",
    "_loop.py",
    "_vector.py",
    "_budget.py",
    "_observers.py",
    "_envside.py",
    "_episode.py",
)

#: ``module: attribute`` -> why it may stay.
ALLOWED_SESSION_PRIVATES = {
    "sandbox/_model.py: _new": "SandboxModel.session builds its Session directly; eval's own callers use new_session",
}

ROUTE_MEMBERS = {n for n in dir(Route) if not n.startswith("__")} | {
    "bind",
    "begin_episode",
    "end_episode",
}


def _session_privates() -> set[str]:
    tree = parse(SRC / "eval" / "_session.py")
    out: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Session":
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AnnAssign)):
                    name = (
                        item.name
                        if isinstance(item, ast.FunctionDef)
                        else getattr(item.target, "id", "")
                    )
                    if name.startswith("_") and not name.startswith("__"):
                        out.add(name)
                elif (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.value, ast.Name)
                    and item.value.id == "self"
                    and item.attr.startswith("_")
                    and not item.attr.startswith("__")
                ):
                    out.add(item.attr)
    return out


def _attrs(path: Path) -> list[ast.Attribute]:
    return [n for n in walk(parse(path)) if isinstance(n, ast.Attribute)]


def test_no_module_outside_the_session_reads_a_private_session_attribute() -> None:
    privates = _session_privates()
    assert {"_drive", "_new"} <= privates
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel == "eval/_session.py":
            continue
        for node in _attrs(path):
            receiver = node.value
            if node.attr in privates and not (
                isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
            ):
                found.add(f"{rel}: {node.attr}")
    assert found <= set(ALLOWED_SESSION_PRIVATES), sorted(found - set(ALLOWED_SESSION_PRIVATES))


def test_the_drive_calls_only_route_protocol_members() -> None:
    for name in DRIVE:
        for node in _attrs(SRC / "eval" / name):
            receiver = node.value
            named = (
                receiver.id
                if isinstance(receiver, ast.Name)
                else receiver.attr
                if isinstance(receiver, ast.Attribute)
                else ""
            )
            if named == "route":
                assert node.attr in ROUTE_MEMBERS, f"eval/{name} reads route.{node.attr}"


def test_the_drive_never_tells_route_kinds_apart() -> None:
    for name in DRIVE:
        text = (SRC / "eval" / name).read_text()
        assert (
            "LocalRoute" not in text and 'predict_lane"' not in text and "hasattr(route" not in text
        ), name


def test_the_viewer_and_the_recorder_read_nothing_private_of_a_session() -> None:
    for path in [
        *(SRC / "view").glob("*.py"),
        SRC / "recorder" / "_capture.py",
        SRC / "recorder" / "_recorder.py",
    ]:
        for node in _attrs(path):
            assert node.attr not in ("_conn", "_connect", "_route", "_drive", "_viewer"), (
                f"{path.name}: {node.attr}"
            )
