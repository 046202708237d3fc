"""SBX-1..5: options, the construction binding, source classification (no Docker involved)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rlmesh.sandbox import SandboxBuild, SandboxInfo, SandboxRuntime
from rlmesh.sandbox._launch import check_source_options
from rlmesh.sandbox._options import binding_json, check_params
from rlmesh.sandbox._source import classify_env_source, classify_model_source, parse_hf


class Probe:
    """A stand-in for the Docker lookups classification needs."""

    def __init__(
        self, *, cli: bool = True, local: tuple[str, ...] = (), pull_error: str | None = None
    ) -> None:
        self.cli = cli
        self.local = set(local)
        self.pull_error = pull_error
        self.pulled: list[str] = []
        self.asked = 0

    def cli_available(self) -> bool:
        self.asked += 1
        return self.cli

    def image_exists(self, ref: str) -> bool:
        self.asked += 1
        return ref in self.local

    def pull(self, ref: str) -> None:
        if self.pull_error:
            raise RuntimeError(self.pull_error)
        self.pulled.append(ref)


def classify(source: Any, probe: Probe | None = None) -> Any:
    p = probe or Probe()
    return classify_env_source(source, lambda: p)


# -- SBX-3 -------------------------------------------------------------------------------------


def test_SBX3_options_are_frozen_dataclasses() -> None:
    build = SandboxBuild(packages=["numpy<2"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        build.packages = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SandboxRuntime().gpus = 1  # type: ignore[misc]
    assert build.packages == ("numpy<2",)


@pytest.mark.parametrize("field", ["packages", "imports"])
def test_SBX3_build_sequences_reject_a_bare_str(field: str) -> None:
    with pytest.raises(TypeError, match="not a bare str"):
        SandboxBuild(**{field: "numpy"})


@pytest.mark.parametrize("field", ["devices", "volumes"])
def test_SBX3_runtime_sequences_reject_a_bare_str(field: str) -> None:
    with pytest.raises(TypeError, match="not a bare str"):
        SandboxRuntime(**{field: "/dev/dri"})


def test_SBX3_gpus_passthrough_and_blank_rejected() -> None:
    assert SandboxRuntime(gpus="all").gpus == "all"
    assert SandboxRuntime(gpus=2).gpus == 2
    with pytest.raises(ValueError, match="blank"):
        SandboxRuntime(gpus="  ")


@pytest.mark.parametrize("user", [0, 1000, "1000", "1000:1000", "app"])
def test_SBX3_user_accepts_uid_and_uid_gid(user: Any) -> None:
    assert SandboxRuntime(user=user).user is not None


@pytest.mark.parametrize("user", [-1, "", " ", "1000:", "a b"])
def test_SBX3_user_rejects_bad_values(user: Any) -> None:
    with pytest.raises(ValueError):
        SandboxRuntime(user=user)


def test_SBX3_base_image_and_package_are_trimmed_single_lines() -> None:
    assert SandboxBuild(base_image=" python:3.12-slim ").base_image == "python:3.12-slim"
    with pytest.raises(ValueError):
        SandboxBuild(rlmesh_package="a\nb")
    with pytest.raises(ValueError):
        SandboxBuild(base_image="   ")


def test_SandboxInfo_has_the_four_spec_fields_first() -> None:
    info = SandboxInfo("gym://X-v0", "gym://X-v0", "tcp://127.0.0.1:1", "abc")
    assert [f.name for f in dataclasses.fields(info)][:4] == [
        "requested_source",
        "resolved_source",
        "address",
        "container_id",
    ]


# -- SBX-4 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["packages", "gpus", "base_image", "volumes", "trust_remote_code"])
def test_SBX4_param_named_like_an_option_is_a_TypeError(name: str) -> None:
    with pytest.raises(
        TypeError, match=r"build=SandboxBuild\(...\) or runtime=SandboxRuntime\(...\)"
    ):
        check_params({name: 1})


def test_SBX4_binding_is_key_sorted_json_and_names_a_bad_param() -> None:
    assert binding_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    with pytest.raises(TypeError, match="'fn'"):
        binding_json({"fn": object()})


# -- SBX-5 -------------------------------------------------------------------------------------


def test_SBX5_security_grants_on_a_prebuilt_image_are_an_error() -> None:
    src = classify("docker://repo/img:1")
    with pytest.raises(ValueError, match="trust_remote_code"):
        check_source_options(src, SandboxBuild(trust_remote_code=True), None, "docker")


def test_SBX5_other_build_options_on_a_prebuilt_image_warn() -> None:
    src = classify("docker://repo/img:1")
    with pytest.warns(UserWarning, match="packages"):
        check_source_options(src, SandboxBuild(packages=["x"]), None, "docker")


def test_SBX5_runtime_flags_on_a_build_source_are_an_error() -> None:
    src = classify("gym://CartPole-v1")
    with pytest.raises(ValueError, match="only supported for a prebuilt sandbox image"):
        check_source_options(src, SandboxBuild(), SandboxRuntime(gpus="all"), "docker")


# -- SBX-1 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "kind", "value"),
    [
        ("gym://CartPole-v1", "gym", "CartPole-v1"),
        ("docker://repo/img:tag", "image", "repo/img:tag"),
        ("image://repo/img@sha256:" + "a" * 64, "image", "repo/img@sha256:" + "a" * 64),
        ("hf://org/repo@main:suite/task", "hf", "org/repo@main:suite/task"),
    ],
)
def test_SBX1_schemes(
    source: str, kind: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = classify(source)
    assert (src.kind, src.value) == (kind, value)
    assert f"rlmesh: resolved {source!r} ->" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["docker://", "image://  "])
def test_SBX1_image_scheme_without_a_reference(source: str) -> None:
    with pytest.raises(ValueError, match="must include an image tag"):
        classify(source)


def test_SBX1_unknown_scheme_and_empty_and_non_str() -> None:
    with pytest.raises(ValueError, match="unsupported sandbox source scheme"):
        classify("s3://bucket/env")
    with pytest.raises(ValueError, match="empty"):
        classify("  ")
    with pytest.raises(TypeError):
        classify(42)


@pytest.mark.parametrize("source", ["CartPole-v1", "pkg:Env-v0", "ALE/Pong-v5"])
def test_SBX1_gym_versioned_names_build_and_never_probe_docker(source: str) -> None:
    probe = Probe()
    src = classify(source, probe)
    assert src.kind == "gym" and src.build
    assert probe.asked == 0


def test_SBX1_image_shaped_bare_name_uses_a_local_image() -> None:
    probe = Probe(local=("repo/img:1",))
    src = classify("repo/img:1", probe)
    assert src.kind == "image" and probe.pulled == []


def test_SBX1_image_shaped_bare_name_is_pulled_when_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    probe = Probe()
    assert classify("repo/img:1", probe).kind == "image"
    assert probe.pulled == ["repo/img:1"]
    assert "pulling" in capsys.readouterr().err


def test_SBX1_unpullable_image_names_both_spellings_and_quotes_the_pull_error() -> None:
    probe = Probe(pull_error="line1\nline2\nmanifest unknown")
    with pytest.raises(ValueError, match="gym://repo/img:1") as info:
        classify("repo/img:1", probe)
    assert "docker://repo/img:1" in str(info.value) and "manifest unknown" in str(info.value)


def test_SBX1_image_shaped_without_a_docker_cli_is_a_RuntimeError() -> None:
    with pytest.raises(RuntimeError, match="Docker CLI"):
        classify("repo/img:1", Probe(cli=False))


def test_SBX1_bare_tagless_name_only_if_a_local_image_exists() -> None:
    assert classify("myenv", Probe(local=("myenv",))).kind == "image"
    probe = Probe()
    with pytest.raises(ValueError, match="gym://myenv") as info:
        classify("myenv", probe)
    assert "docker://myenv" in str(info.value) and probe.pulled == []
    with pytest.raises(ValueError, match="Docker CLI is not on PATH"):
        classify("myenv", Probe(cli=False))


def test_SBX10_hf_references_parse_and_bad_revisions_are_refused() -> None:
    ref = parse_hf("org/repo@v1.0:libero/task_3")
    assert (ref.org, ref.repo, ref.revision, ref.suite, ref.task) == (
        "org",
        "repo",
        "v1.0",
        "libero",
        "task_3",
    )
    for bad in ("org/repo@-x", "org/repo@a*b", "org/repo@a..b", "justrepo", "a/b/c"):
        with pytest.raises(ValueError):
            parse_hf(bad)


# -- SBX-2 -------------------------------------------------------------------------------------


def test_SBX2_model_sources() -> None:
    assert classify_model_source("docker://repo/policy:1").value == "repo/policy:1"
    assert classify_model_source("image://repo/policy").value == "repo/policy"  # untagged is valid
    with pytest.raises(TypeError):
        classify_model_source(3)
    with pytest.raises(ValueError):
        classify_model_source("docker://")
    with pytest.raises(ValueError):
        classify_model_source("gym://CartPole-v1")
    with pytest.raises(ValueError, match="looks like a gym env id"):
        classify_model_source("CartPole-v1")
