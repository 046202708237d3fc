"""The viewer's request guard without a server: ``refusal(request)`` (docs/viewer.md "Security").

The integration tests (tests/integration/test_hardening2_viewer.py) send these requests
over a real socket; here the same rules are checked one by one on a plain request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rlmesh.view._guard import accepted_hosts, refusal

PORT = 8008
HOSTS = accepted_hosts("127.0.0.1", PORT)


@dataclass
class Request:
    """What the guard reads of an aiohttp request."""

    path: str = "/"
    headers: dict[str, str] = field(default_factory=lambda: {"Host": f"127.0.0.1:{PORT}"})
    query: dict[str, str] = field(default_factory=dict)


def refused(request: Request, token: str | None = None) -> str | None:
    return refusal(request, token=token, hosts=HOSTS, port=PORT)


def test_a_plain_local_request_is_served() -> None:
    assert refused(Request()) is None
    assert refused(Request("/control", {"Host": f"localhost:{PORT}"})) is None  # curl: no Origin


def test_a_rebound_host_name_is_refused_with_the_remedy() -> None:
    text = refused(Request(headers={"Host": f"evil.example:{PORT}"}))
    assert text is not None and "View(allowed_hosts=[...])" in text


def test_a_cross_site_request_is_refused_on_every_route() -> None:
    for headers in (
        {"Host": f"127.0.0.1:{PORT}", "Sec-Fetch-Site": "cross-site"},
        {"Host": f"127.0.0.1:{PORT}", "Origin": "http://evil.example"},
    ):
        assert refused(Request("/hud.json", headers)) == "forbidden: cross-site request"


@pytest.mark.parametrize("path", ["/select", "/skip", "/control", "/ws"])
def test_a_state_changing_route_serves_only_this_page(path: str) -> None:
    other_port = {"Host": f"127.0.0.1:{PORT}", "Referer": "http://127.0.0.1:9999/"}
    text = refused(Request(path, other_port))
    assert text is not None and "only this viewer's own page" in text
    own = {"Host": f"127.0.0.1:{PORT}", "Origin": f"http://127.0.0.1:{PORT}"}
    assert refused(Request(path, own)) is None


def test_with_a_token_every_request_carries_it_and_any_host_name_is_fine() -> None:
    headers = {"Host": f"box.lan:{PORT}"}
    assert "needs ?token=" in (refused(Request(headers=headers), token="s3cret") or "")
    assert refused(Request(headers=headers, query={"token": "s3cret"}), token="s3cret") is None
    by_header = {**headers, "X-RLMesh-Token": "s3cret"}
    assert refused(Request(headers=by_header), token="s3cret") is None
    assert refused(Request(headers=headers, query={"token": "wrong"}), token="s3cret")
