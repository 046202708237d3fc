"""Addresses (ADR-1..4, SRV-5, SRV-7, CLT-3): every accepted form binds/connects, every bad one says why."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from integration_envs import CountdownEnv

import rlmesh.numpy as rnp
from rlmesh import EnvServer
from rlmesh.transport import parse_bind_address, parse_connect_address

pytestmark = pytest.mark.timeout(60)


def served(server: EnvServer) -> EnvServer:
    """Start ``server``, prove a client can reach it at its reported address, return it."""
    server.start()
    with rnp.RemoteEnv(server.address, connect_timeout_seconds=5) as env:
        env.reset()
    return server


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:0", "127.0.0.1:0", "0", "localhost:0", ":0", " 127.0.0.1:0 "]
)
def test_tcp_bind_forms_resolve_port_0_to_a_real_loopback_port(address):
    server = EnvServer(CountdownEnv(2), address)
    try:
        url = server.address
        assert url.startswith(
            "tcp://127.0.0.1:"
        )  # ADR-2: "", localhost and a bare port bind 127.0.0.1
        assert int(url.rsplit(":", 1)[1]) > 0  # SRV-7: the real port
        served(server)
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"port": 0},
        {"host": "localhost", "port": 0},
        {"host": "127.0.0.1"},
        {"transport": "tcp", "port": 0},
    ],
    ids=["nothing", "port", "host-port", "host", "transport-tcp"],
)
def test_tcp_bind_helpers(kwargs):
    server = EnvServer(CountdownEnv(2), **kwargs)
    try:
        assert server.address.startswith("tcp://127.0.0.1:") and not server.address.endswith(":0")
        served(server)
    finally:
        server.shutdown()


def test_unix_bind_forms_absolute_relative_and_helpers(short_tmp: Path, monkeypatch):
    absolute = short_tmp / "abs.sock"
    server = EnvServer(CountdownEnv(2), f"unix://{absolute}")
    try:
        assert server.address == f"unix://{absolute}"
        served(server)
    finally:
        server.shutdown()
    monkeypatch.chdir(short_tmp)
    server = EnvServer(CountdownEnv(2), "unix://rel.sock")  # resolved against the cwd (ADR-1)
    try:
        assert server.address == f"unix://{os.getcwd()}/rel.sock"
        served(server)
    finally:
        server.shutdown()
    for kwargs in (
        {"path": str(short_tmp / "h1.sock")},
        {"path": str(short_tmp / "h2.sock"), "transport": "unix"},
    ):
        server = EnvServer(CountdownEnv(2), **kwargs)
        try:
            assert server.address == f"unix://{kwargs['path']}"
            served(server)
            with rnp.RemoteEnv(path=kwargs["path"]) as env:  # the client helper too
                env.reset()
        finally:
            server.shutdown()


@pytest.mark.parametrize(
    "form",
    [
        "tcp://127.0.0.1:{port}",
        "127.0.0.1:{port}",
        "http://127.0.0.1:{port}",
        "localhost:{port}",
        "tcp://127.0.0.1:{port}/",
    ],
)
def test_connect_forms(serve, form):
    server = serve(CountdownEnv(2))
    port = int(server.address.rsplit(":", 1)[1])
    with rnp.RemoteEnv(form.format(port=port)) as env:
        assert env.address.endswith(f":{port}")
        env.reset()


def test_connect_helpers(serve):
    server = serve(CountdownEnv(2))
    port = int(server.address.rsplit(":", 1)[1])
    with rnp.RemoteEnv(host="127.0.0.1", port=port) as env:
        assert env.address == server.address
    with rnp.RemoteEnv(port=port) as env:  # host defaults to loopback
        assert env.address == server.address
    with rnp.RemoteEnv(transport="tcp", host="127.0.0.1", port=port) as env:
        env.reset()


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("", "invalid address: the address is empty"),
        ("   ", "invalid address: the address is empty"),
        ("https://127.0.0.1:5555", "reserved for control-plane URLs"),
        ("ftp://127.0.0.1:5555", "unsupported address scheme 'ftp'"),
        ("http://127.0.0.1:5555", "unsupported address scheme 'http'"),  # connect-only
        ("127.0.0.1:abc", "invalid port 'abc'"),
        ("127.0.0.1:70000", "port 70000 is out of range"),
        ("127.0.0.1:", "needs a port"),
        ("unix://", "names no socket path"),
        ("a:b:c", "expected host:port"),
    ],
)
def test_bad_bind_addresses_are_ValueErrors_naming_the_problem(address, message):
    with pytest.raises(ValueError, match="invalid address") as info:
        EnvServer(CountdownEnv(2), address)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("5555", "expected host:port"),  # a bare port only binds
        (":5555", "needs a host"),
        ("https://example.com:443", "reserved for control-plane URLs"),
        ("grpc://127.0.0.1:1", "unsupported address scheme 'grpc'"),
        ("127.0.0.1:-1", "invalid"),
    ],
)
def test_bad_connect_addresses_are_ValueErrors_before_dialing(address, message):
    with pytest.raises(ValueError, match="invalid address") as info:
        rnp.RemoteEnv(address)
    assert message in str(info.value)


def test_an_address_that_is_not_a_string_is_a_TypeError():
    with pytest.raises(TypeError, match="address must be a str"):
        parse_bind_address(5555)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="address must be a str"):
        rnp.RemoteEnv(5555)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"address": "127.0.0.1:0", "port": 0}, ValueError, "not both"),
        ({"path": "/tmp/x.sock", "host": "127.0.0.1"}, ValueError, "path excludes host and port"),
        ({"path": "/tmp/x.sock", "port": 1}, ValueError, "path excludes host and port"),
        ({"transport": "unix"}, ValueError, "transport='unix' needs path="),
        ({"transport": "unix", "host": "127.0.0.1", "port": 1}, ValueError, "needs path="),
        ({"transport": "tcp", "path": "/tmp/x.sock"}, ValueError, "path needs transport='unix'"),
        ({"transport": "udp", "port": 1}, ValueError, "transport must be 'tcp' or 'unix'"),
        ({"port": "5555"}, TypeError, "port must be an int"),
        ({"port": True}, TypeError, "port must be an int"),
        ({"port": 65536}, ValueError, "0..65535"),
        ({"port": -1}, ValueError, "0..65535"),
    ],
)
def test_helper_conflicts_on_the_server(kwargs, error, message):
    address = kwargs.pop("address", None)
    with pytest.raises(error, match=message):
        EnvServer(CountdownEnv(2), address, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "address or host/port is required"),
        ({"host": "127.0.0.1"}, "port is required when connecting with host/path helpers"),
        ({"transport": "tcp"}, "port is required"),
        ({"address": "127.0.0.1:1", "host": "127.0.0.1"}, "not both"),
    ],
)
def test_helper_requirements_on_the_client(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rnp.RemoteEnv(**kwargs)


def test_parsed_addresses_normalize_to_urls():
    assert parse_bind_address("0").url == "tcp://127.0.0.1:0"
    assert parse_bind_address("[::1]:7").url == "tcp://[::1]:7"
    assert parse_connect_address("http://10.0.0.1:80").url == "tcp://10.0.0.1:80"
    assert parse_connect_address("TCP://h:1").url == "tcp://h:1"
    assert parse_connect_address("unix:///a/b.sock").url == "unix:///a/b.sock"


def test_connecting_by_name_tries_every_resolved_address(serve, monkeypatch):
    """A name that resolves to an address nobody listens on first (e.g. ``::1``) still connects."""
    server = serve(CountdownEnv(2))
    port = int(server.address.rsplit(":", 1)[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    real = socket.getaddrinfo

    def fake_getaddrinfo(host, p, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "envhost":
            bad = real("127.0.0.2", dead, *args, **kwargs)  # refused: nobody listens there
            good = real("127.0.0.1", p, *args, **kwargs)
            return bad + good
        return real(host, p, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    with rnp.RemoteEnv(f"envhost:{port}", connect_timeout_seconds=5) as env:
        env.reset()
