"""docs/protocol.md's state table is generated from ``rlmesh.wire.session`` (issue 23 item 5).

The table is drawn from the data the session applies (h11 draws its state diagram from its
code); a change to ``LEGAL``/``REPLIES``/``TRANSITIONS`` without re-running
``tools/gen_protocol_table.py`` fails here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from rlmesh.wire import messages as m, session as s

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_protocol_table", ROOT / "tools" / "gen_protocol_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_doc_table_is_the_session_table(gen: ModuleType) -> None:
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert gen.current(text) == gen.render_table(), (
        "docs/protocol.md's state table is stale: run `PYTHONPATH=src python tools/gen_protocol_table.py`"
    )


def test_the_table_follows_a_change_to_the_session(
    gen: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generator reads the session's data (so the staleness check can fail)."""
    before = gen.render_table()
    assert "| `READY` | `Close` | `CloseReply` | `CLOSED` |" in before
    monkeypatch.setitem(s.TRANSITIONS, (s.READY, m.Shutdown.KIND, m.ShutdownReply.KIND), s.CLOSED)
    after = gen.render_table()
    assert "| `READY` | `Shutdown` | `ShutdownReply` | `CLOSED` |" in after
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert gen.current(text) != after


def test_every_legal_request_and_reply_is_in_the_table(gen: ModuleType) -> None:
    table = gen.render_table()
    for state, legal in s.LEGAL.items():
        for request in legal:
            for reply in s.REPLIES[request]:
                assert (
                    f"`{m.KINDS[request].__name__}`" in table
                    and f"`{m.KINDS[reply].__name__}`" in table
                ), (state, request)
