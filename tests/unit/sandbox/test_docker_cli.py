"""SBX-13..19 against a fake ``docker``: argv, hang guards, error paths, cleanup, orphan reaping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sbx_fakes import fake_docker_fixture  # noqa: F401  (the fake_docker fixture)

from rlmesh.sandbox import (
    DockerUnavailable,
    SandboxBuild,
    SandboxModel,
    SandboxRuntime,
    SandboxStartError,
    _docker,
)
from rlmesh.sandbox._docker import (
    Container,
    DockerCLI,
    build_image,
    orphan_verdict,
    parse_port,
    reap_orphans,
    run_argv,
    start_container,
)
from rlmesh.sandbox._errors import SandboxBuildError, SandboxError
from rlmesh.sandbox._launch import choose_backend, prebuilt_env
from rlmesh.sandbox._plan import make_plan
from rlmesh.sandbox._progress import Progress
from rlmesh.sandbox._source import Source

pytestmark = pytest.mark.slow  # sandbox (a fake docker CLI per call): kept out of make test-fast

CID = "c0ffee" * 10 + "abcd"
DOWN = "Cannot connect to the Docker daemon at unix:///nope.sock. Is the docker daemon running?\n"


def quiet() -> Progress:
    return Progress("test")


# -- SBX-13: the one argv builder ------------------------------------------------------------


def test_SBX13_run_argv_is_hardened_and_labelled() -> None:
    argv = run_argv("img:1", name="rlmesh-sandbox-x-1", env={"A": "1", "B": "x y"}, owner_pid=4242)
    assert argv[:3] == ["run", "-d", "--init"]
    joined = " ".join(argv)
    assert "-p 127.0.0.1::50051" in joined
    assert "--cap-drop ALL" in joined and "--security-opt no-new-privileges" in joined
    assert (
        "--label rlmesh.sandbox=1" in joined and "--label rlmesh.sandbox.owner-pid=4242" in joined
    )
    if os.path.exists("/proc/self/ns/pid"):
        assert "rlmesh.sandbox.owner-pid-ns=pid:[" in joined
    assert "--rm" not in argv
    assert argv[argv.index("-e") + 1] == "A=1" and "B=x y" in argv
    assert argv[-1] == "img:1"


def test_SBX13_runtime_flags_in_order_before_the_image() -> None:
    rt = SandboxRuntime(
        gpus="all", devices=["nvidia.com/gpu=all", "/dev/dri"], volumes=["/a:/b:ro"], user=1000
    )
    argv = run_argv("img:1", name="n", env={"K": "V"}, runtime=rt)
    tail = argv[argv.index("--gpus") :]
    assert tail == [
        "--gpus", "all", "--user", "1000", "--device", "nvidia.com/gpu=all", "--device", "/dev/dri",
        "-v", "/a:/b:ro", "-e", "K=V", "img:1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "port"),
    [
        ("127.0.0.1:49153\n", 49153),
        ("0.0.0.0:1234\n[::]:1234\n", 1234),
        ("[::]:5555", 5555),
        ("\n127.0.0.1:7\n", 7),
    ],
)
def test_SBX13_port_parsing(text: str, port: int) -> None:
    assert parse_port(text) == port


def test_SBX13_unparseable_port_output() -> None:
    with pytest.raises(SandboxError):
        parse_port("nothing here")


def test_SBX14_prebuilt_env_injection() -> None:
    assert prebuilt_env({}, None, None) == {}
    assert prebuilt_env({}, 1, None) == {}
    assert prebuilt_env({"b": 1, "a": 2}, 4, "async") == {
        "RLMESH_MAKE_KWARGS": '{"a":2,"b":1}',
        "RLMESH_NUM_ENVS": "4",
        "RLMESH_VECTORIZATION_MODE": "async",
    }


# -- missing CLI, down daemon, hang guard (SBX-16) --------------------------------------------


def test_docker_cli_missing_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("RLMESH_DOCKER", str(tmp_path / "no-docker"))
    cli = DockerCLI()
    assert not cli.cli_available()
    with pytest.raises(DockerUnavailable, match="not on PATH") as info:
        cli.ensure_daemon()
    assert isinstance(info.value, RuntimeError) and "backend='venv'" in str(info.value)


def test_daemon_down_is_a_clear_error(fake_docker: Any) -> None:
    fake_docker.on("version", {"rc": 1, "stderr": DOWN})
    cli = DockerCLI()
    assert cli.daemon_running() is False
    with pytest.raises(DockerUnavailable, match="daemon is not reachable") as info:
        cli.ensure_daemon()
    assert "Is the docker daemon running" in str(info.value)


def test_SBX16_a_hung_docker_call_is_bounded(fake_docker: Any) -> None:
    fake_docker.on("ps", {"sleep": 30})
    with pytest.raises(DockerUnavailable, match="Docker daemon not responding: 'docker ps'"):
        DockerCLI().run(["ps"], timeout=0.5)


def test_auto_backend_picks_venv_for_gym_when_the_daemon_is_down(
    fake_docker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLMESH_SANDBOX_BACKEND", raising=False)
    gym, image = Source("gym://X-v0", "gym", "X-v0"), Source("docker://i:1", "image", "i:1")
    fake_docker.on("version", {"rc": 1, "stderr": DOWN})
    assert choose_backend(None, gym, DockerCLI()) == "venv"
    assert choose_backend("auto", image, DockerCLI()) == "docker"
    with pytest.raises(ValueError, match="prebuilt image"):
        choose_backend("venv", image, DockerCLI())
    with pytest.raises(ValueError, match="backend must be one of"):
        choose_backend("podman", gym, DockerCLI())
    fake_docker.on("version", {"stdout": "20.10.24\n"})
    assert choose_backend(None, gym, DockerCLI()) == "docker"
    monkeypatch.setenv("RLMESH_SANDBOX_BACKEND", "venv")
    assert choose_backend(None, gym, DockerCLI()) == "venv"


# -- start / readiness / cleanup (SBX-17, SBX-18) --------------------------------------------


def test_SBX13_a_failed_docker_run_removes_the_container_by_name(fake_docker: Any) -> None:
    fake_docker.on(
        "run", {"rc": 125, "stderr": "docker: Error response from daemon: bad device.\n"}
    )
    with pytest.raises(SandboxError, match="bad device"):
        start_container(
            DockerCLI(),
            "img:1",
            slug="x",
            env={},
            runtime=None,
            connect_timeout_seconds=5,
            progress=quiet(),
        )
    calls = fake_docker.calls()
    name = calls[[c[0] for c in calls].index("run")][
        calls[[c[0] for c in calls].index("run")].index("--name") + 1
    ]
    assert ["rm", "-f", name] in calls


def test_SBX17_container_exiting_before_ready_fails_fast_with_logs_and_is_removed(
    fake_docker: Any,
) -> None:
    fake_docker.on("run", {"stdout": CID + "\n"})
    fake_docker.on("port", {"stdout": "127.0.0.1:9\n"})  # nothing listens on port 9
    fake_docker.on("inspect", {"stdout": "exited 1\n"})
    fake_docker.on("logs", {"stdout": "Traceback ...\nValueError: make() exploded\n"})
    with pytest.raises(SandboxStartError, match="exited before becoming ready") as info:
        start_container(
            DockerCLI(),
            "img:1",
            slug="x",
            env={},
            runtime=None,
            connect_timeout_seconds=30,
            progress=quiet(),
        )
    assert "make() exploded" in str(info.value)
    assert ["rm", "-f", CID] in fake_docker.calls()


def test_SBX17_readiness_deadline_names_the_timeout_and_removes_the_container(
    fake_docker: Any,
) -> None:
    fake_docker.on("run", {"stdout": CID + "\n"})
    fake_docker.on("port", {"stdout": "127.0.0.1:9\n"})
    fake_docker.on("inspect", {"stdout": "running 0\n"})
    fake_docker.on("logs", {"stdout": "still importing\n"})
    with pytest.raises(SandboxStartError, match=r"did not become ready within 0\.5s") as info:
        start_container(
            DockerCLI(),
            "img:1",
            slug="x",
            env={},
            runtime=None,
            connect_timeout_seconds=0.5,
            progress=quiet(),
        )
    assert "still importing" in str(info.value)
    assert ["stop", "-t", "5", CID] in fake_docker.calls() and [
        "rm",
        "-f",
        CID,
    ] in fake_docker.calls()


def test_SBX17_an_inspect_failure_is_a_distinct_error(fake_docker: Any) -> None:
    fake_docker.on("run", {"stdout": CID + "\n"})
    fake_docker.on("port", {"stdout": "127.0.0.1:9\n"})
    fake_docker.on("inspect", {"rc": 1, "stderr": "context deadline exceeded\n"})
    with pytest.raises(SandboxStartError, match=r"could not inspect .* \(docker daemon busy\?\)"):
        start_container(
            DockerCLI(),
            "img:1",
            slug="x",
            env={},
            runtime=None,
            connect_timeout_seconds=30,
            progress=quiet(),
        )
    assert ["rm", "-f", CID] in fake_docker.calls()


def test_SBX18_a_crash_while_reading_the_port_is_reported_with_logs(fake_docker: Any) -> None:
    fake_docker.on("run", {"stdout": CID + "\n"})
    fake_docker.on("port", {"rc": 1, "stderr": "Error: No public port '50051/tcp' published\n"})
    fake_docker.on("logs", {"stdout": "ImportError: no module named gymnasium\n"})
    fake_docker.on("inspect", {"stdout": "exited 1\n"})
    with pytest.raises(SandboxStartError, match="did not publish its port") as info:
        start_container(
            DockerCLI(),
            "img:1",
            slug="x",
            env={},
            runtime=None,
            connect_timeout_seconds=30,
            progress=quiet(),
        )
    assert "no module named gymnasium" in str(info.value)
    assert ["rm", "-f", CID] in fake_docker.calls()


# -- stop (SBX-19) ------------------------------------------------------------------------------


def test_SBX19_stop_running_container_stops_then_removes(fake_docker: Any) -> None:
    fake_docker.on("inspect", {"stdout": "running 0\n"})
    c = Container(DockerCLI(), CID, "n", "img:1")
    c.stop()
    cmds = [call for call in fake_docker.calls() if call[0] in ("stop", "rm")]
    assert cmds == [["stop", "-t", "5", CID], ["rm", "-f", CID]]
    c.stop()  # idempotent
    assert len(fake_docker.calls()) == 3


def test_SBX19_no_such_container_counts_as_stopped(fake_docker: Any) -> None:
    fake_docker.on("inspect", {"rc": 1, "stderr": "Error: No such object: abc\n"})
    c = Container(DockerCLI(), CID, "n", "img:1")
    c.stop()
    assert c.stopped and "rm" not in fake_docker.commands()


def test_SBX19_a_failed_remove_raises_and_can_be_retried(fake_docker: Any) -> None:
    fake_docker.on("inspect", {"stdout": "exited 0\n"})
    fake_docker.on(
        "rm", {"rc": 1, "stderr": "Error response from daemon: removal in progress\n"}, {"rc": 0}
    )
    c = Container(DockerCLI(), CID, "n", "img:1")
    with pytest.raises(SandboxError, match="removal in progress"):
        c.stop()
    assert not c.stopped
    c.stop()
    assert c.stopped


# -- orphans (SBX-15) ---------------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_SBX15_reaping_removes_only_provable_orphans_of_this_host(
    fake_docker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 15: a shared daemon's other hosts, other namespaces and unlabelled containers are spared."""
    ns, boot = "pid:[4026531836]", "e821ddb8-85f2-4229-9e62-15cc4fec582c"
    other_boot = "0f0f0f0f-1111-2222-3333-444444444444"
    monkeypatch.setattr(_docker, "_pid_namespace", lambda: ns)
    monkeypatch.setattr(_docker, "boot_id", lambda: boot)
    dead = _dead_pid()
    rows = [
        f"aaa\texited\t{dead}\t{ns}\t{boot}",  # dead owner on this host -> reaped
        f"bbb\trunning\t{os.getpid()}\t{ns}\t{boot}",  # ours -> spared
        f"ccc\trunning\t{os.getppid()}\t{ns}\t{boot}",  # alive owner -> spared
        f"ddd\trunning\t{dead}\tpid:[1]\t{boot}",  # another namespace: unknown liveness -> spared
        f"eee\trunning\t{dead}\t{ns}\t{other_boot}",  # another host, same init namespace id -> spared
        f"fff\trunning\t{dead}\t{ns}\t",  # pre-host-id label set (two hosts reaped each other) -> spared
        "ggg\texited\t\t\t",  # no owner at all -> spared
        "hhh\trunning\t\t\t",
        f"iii\trunning\t{dead}\t{ns}\t{boot}",  # dead owner on this host, still running -> reaped
    ]
    fake_docker.on("ps", {"stdout": "\n".join(rows) + "\n"})
    assert reap_orphans(DockerCLI()) == ["aaa", "iii"]
    removed = [c[-1] for c in fake_docker.calls() if c[0] == "rm"]
    assert removed == ["aaa", "iii"]
    ps = next(c for c in fake_docker.calls() if c[0] == "ps")
    assert "label=rlmesh.sandbox=1" in ps
    assert "rlmesh.sandbox.owner-boot-id" in ps[-1]


def test_SBX15_a_host_without_a_boot_id_reaps_nothing(
    fake_docker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_docker, "_pid_namespace", lambda: "pid:[1]")
    monkeypatch.setattr(_docker, "boot_id", lambda: None)
    fake_docker.on("ps", {"stdout": f"aaa\texited\t{_dead_pid()}\tpid:[1]\t\n"})
    assert reap_orphans(DockerCLI()) == []
    assert "rm" not in fake_docker.commands()


@pytest.mark.parametrize(
    ("labels", "kept"),
    [
        ({"owner-pid": "7", "owner-pid-ns": "ns", "owner-boot-id": "B"}, None),
        ({"owner-pid": "7", "owner-pid-ns": "ns", "owner-boot-id": "other"}, "another host"),
        ({"owner-pid": "7", "owner-pid-ns": "ns2", "owner-boot-id": "B"}, "another pid namespace"),
        ({"owner-pid": "7", "owner-pid-ns": "ns"}, "unknown provenance"),
        ({"owner-pid-ns": "ns", "owner-boot-id": "B"}, "unknown provenance"),
        ({"owner-pid": "9", "owner-pid-ns": "ns", "owner-boot-id": "B"}, "alive"),
        ({"owner-pid": "1", "owner-pid-ns": "ns", "owner-boot-id": "B"}, "this process"),
    ],
)
def test_SBX15_orphan_verdict(labels: dict[str, str], kept: str | None) -> None:
    verdict = orphan_verdict(
        labels, me=1, my_boot_id="B", my_pid_ns="ns", alive=lambda pid: pid == 9
    )
    if kept is None:
        assert verdict is None
    else:
        assert verdict is not None and kept in verdict


def test_SBX15_containers_are_labelled_with_this_hosts_boot_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_docker, "boot_id", lambda: "B00T")
    argv = run_argv("img:1", name="n", env={}, owner_pid=4242)
    assert "rlmesh.sandbox.owner-boot-id=B00T" in argv
    if os.path.exists(_docker.BOOT_ID_FILE):
        monkeypatch.undo()
        assert _docker.boot_id() == Path(_docker.BOOT_ID_FILE).read_text().strip()


def test_SBX15_reaping_never_fails_a_start(fake_docker: Any) -> None:
    fake_docker.on("ps", {"rc": 1, "stderr": DOWN})
    assert reap_orphans(DockerCLI()) == []


# -- image builds (SBX-7/8) ---------------------------------------------------------------------


def test_SBX7_an_existing_tag_is_reused_without_building(fake_docker: Any, tmp_path: Any) -> None:
    plan = make_plan(
        Source("gym://CartPole-v1", "gym", "CartPole-v1"), SandboxBuild(base_image="b:1"), tmp_path
    )
    fake_docker.on("image inspect", {"stdout": "sha256:abc\n"})
    assert build_image(DockerCLI(), plan, quiet()) == plan.image_tag
    assert "build" not in fake_docker.commands()


def test_SBX8_a_failed_build_reports_the_build_output_tail(fake_docker: Any, tmp_path: Any) -> None:
    plan = make_plan(
        Source("gym://CartPole-v1", "gym", "CartPole-v1"),
        SandboxBuild(base_image="b:1", build_memory="2g"),
        tmp_path,
    )
    fake_docker.on("image inspect", {"rc": 1, "stderr": "Error: No such image: x\n"})
    fake_docker.on(
        "build",
        {
            "rc": 1,
            "stdout": "Step 5/6 : RUN pip install\nERROR: No matching distribution found for nope\n",
        },
    )
    with pytest.raises(SandboxBuildError, match="No matching distribution found for nope"):
        build_image(DockerCLI(), plan, quiet())
    build = next(c for c in fake_docker.calls() if c[0] == "build")
    assert "--force-rm" in build and build[build.index("-t") + 1] == plan.image_tag
    assert (
        build[build.index("--memory") + 1] == "2g"
        and build[build.index("--memory-swap") + 1] == "2g"
    )


# -- SandboxModel (SBX-23) -----------------------------------------------------------------------


def test_SBX23_SandboxModel_construction_is_inert(fake_docker: Any) -> None:
    model = SandboxModel("docker://repo/policy:1", temperature=0.5)
    assert fake_docker.calls() == []
    with pytest.raises(RuntimeError, match=r"SandboxModel is not serving; call serve\(\)"):
        _ = model.address
    with pytest.raises(RuntimeError, match="not serving"):
        _ = model.container_id
    model.shutdown()  # idempotent when never served
    with pytest.raises(TypeError, match="runtime=SandboxRuntime"):
        SandboxModel("docker://repo/policy:1", gpus="all")


def test_SBX24_session_rejects_instruction_and_trust(fake_docker: Any) -> None:
    model = SandboxModel("docker://repo/policy:1")
    with pytest.raises(ValueError, match="instruction"):
        model.session("127.0.0.1:1", instruction="pick")
    with pytest.raises(ValueError, match="trust_entrypoints"):
        model.session("127.0.0.1:1", trust_entrypoints=True)
    assert fake_docker.calls() == []


def test_SBX23_serve_on_a_down_daemon_is_a_clear_error(fake_docker: Any) -> None:
    fake_docker.on("version", {"rc": 1, "stderr": DOWN})
    with pytest.raises(DockerUnavailable, match="daemon is not reachable"):
        SandboxModel("docker://repo/policy:1").serve()
    assert "run" not in fake_docker.commands()
