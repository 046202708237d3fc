"""Prometheus metrics on a port of the endpoint's own (issue 36).

Scrapes are parsed with ``prometheus_client``'s own text parser, as Prometheus reads them.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import rlmesh
from conftest import child_env, require, wait_for_ready_file
from rlmesh import numpy as rn
from rlmesh.errors import AuthenticationFailed, EndpointBusy
from rlmesh.serve import ModelServer, ServeOptions

prometheus_client = require("prometheus_client", "the metrics extra")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def scrape(url: str) -> dict[str, float]:
    """``{sample name{labels}: value}`` of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers.get_content_type() == "text/plain"
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def _drive(address: str, steps: int, **kw: Any) -> None:
    env = rn.RemoteEnv(address, **kw)
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(obs[2] + 0.5 * obs[3] > 0))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()


def test_the_cli_serves_metrics_and_100_steps_show(short_tmp: Path) -> None:
    ready = short_tmp / "ready"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1", "--address", "127.0.0.1:0",
            "--metrics", "127.0.0.1:0", "--ready-file", str(ready),
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        address = wait_for_ready_file(proc, ready, 60.0)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "metrics on http://127.0.0.1:" in line, line
        url = line.split("metrics on ", 1)[1].split("]", 1)[0].strip()
        _drive(address, 100)
        values = scrape(url)
        assert values["rlmesh_env_steps_total"] >= 100
        assert values["rlmesh_env_resets_total"] >= 1
        assert values["rlmesh_env_step_duration_seconds_count"] >= 100
        assert values['rlmesh_env_step_duration_seconds_bucket{le="+Inf"}'] >= 100
        assert values['rlmesh_wire_bytes_total{direction="received"}'] > 0
        assert values['rlmesh_wire_bytes_total{direction="sent"}'] > 0
        assert values["rlmesh_sessions_active"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_counter_counts_what_happened() -> None:
    server = rlmesh.EnvServer(
        gym.make("CartPole-v1"),
        "127.0.0.1:0",
        options=ServeOptions(token="t", metrics_address="127.0.0.1:0"),
    ).start()
    try:
        url = server.metrics_address
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        with pytest.raises(AuthenticationFailed):
            rn.RemoteEnv(server.address)
        first = rn.RemoteEnv(server.address, token="t")
        with pytest.raises(EndpointBusy):
            rn.RemoteEnv(server.address, token="t")
        assert scrape(url)["rlmesh_sessions_active"] == 1
        obs, _ = first.reset(seed=0)
        episodes = 0
        for _ in range(300):
            obs, _, terminated, truncated, _ = first.step(0)  # always left: short episodes
            if terminated or truncated:
                episodes += 1
                obs, _ = first.reset()
        first.close()
        values = scrape(url)
        assert values["rlmesh_env_steps_total"] == 300
        assert values["rlmesh_env_resets_total"] == episodes + 1
        assert values["rlmesh_env_episodes_total"] == episodes
        assert values["rlmesh_auth_failures_total"] == 1
        assert values["rlmesh_sessions_rejected_total"] == 1
        assert values["rlmesh_sessions_active"] == 0
        # the histogram is cumulative and ends at the count; its sum is the time spent
        buckets = [
            v for k, v in values.items() if k.startswith("rlmesh_env_step_duration_seconds_bucket")
        ]
        assert buckets == sorted(buckets) and buckets[-1] == 300
        assert 0 < values["rlmesh_env_step_duration_seconds_sum"] < 300  # seconds, not ns
    finally:
        server.shutdown()
    with pytest.raises(OSError):  # the metrics port closes with the server
        urllib.request.urlopen(url, timeout=5)


def test_a_vector_endpoint_counts_every_lane() -> None:
    server = rlmesh.EnvServer(
        [gym.make("CartPole-v1") for _ in range(4)],
        "127.0.0.1:0",
        options=ServeOptions(metrics_address="127.0.0.1:0"),
    ).start()
    try:
        env = rn.RemoteVectorEnv(server.address)
        env.reset(seed=0)
        for _ in range(10):
            env.step([0, 1, 0, 1])
        env.close()
        values = scrape(server.metrics_address)
        assert values["rlmesh_env_steps_total"] == 40
        assert values["rlmesh_env_step_duration_seconds_count"] == 10  # per step request
    finally:
        server.shutdown()


def test_session_workers_report_through_their_supervisor() -> None:
    server = rlmesh.EnvServer(
        "CartPole-v1",
        "127.0.0.1:0",
        sessions=2,
        options=ServeOptions(metrics_address="127.0.0.1:0"),
    ).start()
    try:
        a, b = rn.RemoteEnv(server.address), rn.RemoteEnv(server.address)
        for env, n in ((a, 30), (b, 20)):
            env.reset(seed=0)
            for _ in range(n):
                _, _, terminated, truncated, _ = env.step(1)
                if terminated or truncated:
                    env.reset()
        assert scrape(server.metrics_address)["rlmesh_sessions_active"] == 2
        a.close()
        b.close()
        supervisor = server._supervisor
        # the workers' last reports arrive as they end: wait for both (bounded)
        for _ in range(200):
            if not supervisor._workers and supervisor._reports is not None:
                values = scrape(server.metrics_address)
                if values["rlmesh_env_steps_total"] == 50:
                    break
            time.sleep(0.05)
        values = scrape(server.metrics_address)
        assert values["rlmesh_env_steps_total"] == 50  # one scrape: both workers' steps
        assert values["rlmesh_env_step_duration_seconds_count"] == 50
        assert values["rlmesh_sessions_active"] == 0
    finally:
        server.shutdown()


def test_model_servers_report_predict_durations_and_batch_sizes() -> None:
    server = ModelServer(
        rn.Model(lambda obs: 0), "127.0.0.1:0", options=ServeOptions(metrics_address="127.0.0.1:0")
    ).start()
    try:
        result = rlmesh.RemoteModel(server.address).run(
            gym.make("CartPole-v1"), seeds=[0], max_episode_steps=25
        )
        steps = result.episodes[0].steps
        values = scrape(server.metrics_address)
        assert values["rlmesh_model_predict_duration_seconds_count"] == steps
        assert values["rlmesh_model_batch_size_count"] == steps
        assert values['rlmesh_model_batch_size_bucket{le="1"}'] == steps  # one observation each
        assert values["rlmesh_model_batch_size_sum"] == steps
        assert "rlmesh_env_steps_total" not in values  # a model endpoint has no env families
        assert values['rlmesh_wire_bytes_total{direction="received"}'] > 0
    finally:
        server.shutdown()


def test_metrics_need_the_extra_and_a_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(rlmesh.errors.BindFailed, match="metrics port"):
            rlmesh.EnvServer(
                gym.make("CartPole-v1"),
                "127.0.0.1:0",
                options=ServeOptions(metrics_address=f"127.0.0.1:{port}"),
            )
    finally:
        taken.close()
    import builtins

    real_import = builtins.__import__

    def no_prometheus(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("prometheus_client"):
            raise ImportError("no prometheus_client here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_prometheus)
    with pytest.raises(ImportError, match=r"rlmesh-py\[metrics\]"):
        rlmesh.EnvServer(
            gym.make("CartPole-v1"), "127.0.0.1:0", options=ServeOptions(metrics_address="0")
        )


def test_without_metrics_nothing_is_counted() -> None:
    server = rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
    try:
        assert server.metrics_address is None
        assert server._loop._meter is None  # the loop counts nothing, per step or otherwise
        _drive(server.address, 5)
    finally:
        server.shutdown()


def test_the_openpi_bridge_serves_metrics_too() -> None:
    require("websockets", "the openpi extra")
    import numpy as np

    from rlmesh.openpi import PolicyClient

    server = ModelServer(
        rn.Model(lambda obs: np.zeros(2, np.float32)),
        "127.0.0.1:0",
        protocol="openpi",
        options=ServeOptions(metrics_address="127.0.0.1:0"),
    ).start()
    try:
        client = PolicyClient(server.address, obs_map={"observation/state": ""})
        for _ in range(3):
            client.predict_chunk(np.zeros(3, np.float32))
        values = scrape(server.metrics_address)
        assert values["rlmesh_model_predict_duration_seconds_count"] == 3
        assert values["rlmesh_model_batch_size_sum"] == 3
        assert values["rlmesh_sessions_active"] == 1
        assert values['rlmesh_wire_bytes_total{direction="sent"}'] > 0
        client.close()
    finally:
        server.shutdown()
