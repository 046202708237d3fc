"""Handshakes without sockets: edition selection and refusals (the state machine: test_session_pair.py)."""

from __future__ import annotations

from rlmesh._build import PROTOCOL_GENERATION, select_edition
from rlmesh.wire import answer_hello, make_hello, messages as m


def test_server_selects_the_highest_mutual_edition() -> None:
    welcome = answer_hello(
        make_hello("c", None), declared=None, service="env", component="s", session_id="x"
    )
    assert isinstance(welcome, m.Welcome) and welcome.selected == "2026.06"


def test_generation_mismatch_is_incompatible() -> None:
    hello = m.Hello(generation="rlmesh-wire-v1", peer=m.PeerInfo(), editions=["2026.06"])
    answer = answer_hello(hello, declared=None, service="env", component="s", session_id="x")
    assert isinstance(answer, m.Incompatible)
    assert f"not compatible with server {PROTOCOL_GENERATION}" in answer.message


def test_no_mutual_edition_names_both_offers() -> None:
    hello = m.Hello(
        generation=PROTOCOL_GENERATION, peer=m.PeerInfo(), editions=["2030.01"], preferred="2030.01"
    )
    answer = answer_hello(hello, declared=None, service="env", component="s", session_id="x")
    assert isinstance(answer, m.Incompatible) and "no mutual workflow edition" in answer.message


def test_wrong_service_is_incompatible() -> None:
    answer = answer_hello(
        make_hello("c", None, service="model"),
        declared=None,
        service="env",
        component="s",
        session_id="x",
    )
    assert (
        isinstance(answer, m.Incompatible)
        and "serves the env service; the client asked for the model service" in answer.message
    )


def test_edition_ordering_puts_cohorts_above_their_base() -> None:
    assert (
        select_edition(["2026.06", "2026.06-0.1.0-rc.5"], ["2026.06", "2026.06-0.1.0-rc.5"])
        == "2026.06-0.1.0-rc.5"
    )
    assert (
        select_edition(["2026.06", "2026.06-rc"], ["2026.06", "2026.06-rc"], ceilings=["2026.06"])
        == "2026.06"
    )
    assert select_edition(["2026.06"], ["2025.12"]) is None
