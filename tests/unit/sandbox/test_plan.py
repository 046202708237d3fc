"""SBX-6..9, SBX-11: the effective build, its content hash, the wheel and the generated Dockerfile."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

import rlmesh
from rlmesh.sandbox import SandboxBuild
from rlmesh.sandbox._docker import parse_build_memory
from rlmesh.sandbox._plan import DEFAULT_BASE_IMAGE, make_plan, sanitize_slug
from rlmesh.sandbox._source import Source
from rlmesh.sandbox._wheel import build_wheel

pytestmark = pytest.mark.slow  # sandbox (image plans and wheel builds): kept out of make test-fast

GYM = Source("gym://CartPole-v1", "gym", "CartPole-v1")


@pytest.fixture(autouse=True)
def _no_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "RLMESH_SANDBOX_BASE_IMAGE",
        "RLMESH_SANDBOX_RLMESH_PACKAGE",
        "RLMESH_SANDBOX_BUILD_MEMORY",
    ):
        monkeypatch.delenv(var, raising=False)


def test_O10_the_wheel_is_reproducible_and_holds_the_package(tmp_path: Path) -> None:
    a = build_wheel(tmp_path / "a")
    b = build_wheel(tmp_path / "b")
    assert a.name == f"rlmesh-{rlmesh.__version__}-py3-none-any.whl"
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    with zipfile.ZipFile(a) as zf:
        names = zf.namelist()
        assert "rlmesh/__init__.py" in names and "rlmesh/sandbox/_bootstrap.py" in names
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        meta = zf.read(f"rlmesh-{rlmesh.__version__}.dist-info/METADATA").decode()
        assert "Requires-Dist: numpy" in meta and "Requires-Dist: msgspec" in meta
        record = zf.read(f"rlmesh-{rlmesh.__version__}.dist-info/RECORD").decode()
        assert "rlmesh/__init__.py,sha256=" in record


def test_SBX6_defaults_and_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(GYM, SandboxBuild(), tmp_path)
    assert (
        plan.base_image == DEFAULT_BASE_IMAGE and plan.package == "local" and plan.wheel is not None
    )
    monkeypatch.setenv("RLMESH_SANDBOX_BASE_IMAGE", "  my/base:1 ")
    monkeypatch.setenv("RLMESH_SANDBOX_RLMESH_PACKAGE", "rlmesh==0.1.0")
    plan = make_plan(GYM, SandboxBuild(), tmp_path)
    assert plan.base_image == "my/base:1" and plan.package == "rlmesh==0.1.0" and plan.wheel is None
    plan = make_plan(GYM, SandboxBuild(base_image="x/y:2"), tmp_path)
    assert plan.base_image == "x/y:2"  # the field wins over the env var


def test_SBX7_tag_is_content_addressed_and_stable(tmp_path: Path) -> None:
    a = make_plan(GYM, SandboxBuild(packages=["numpy<2"]), tmp_path / "a")
    b = make_plan(GYM, SandboxBuild(packages=["numpy<2"]), tmp_path / "b")
    assert a.image_tag == b.image_tag
    assert (
        a.image_tag.startswith("rlmesh-sandbox-cartpole-v1:")
        and len(a.image_tag.split(":")[1]) == 12
    )
    c = make_plan(GYM, SandboxBuild(packages=["numpy<3"]), tmp_path / "c")
    d = make_plan(GYM, SandboxBuild(packages=["numpy<2"], base_image="other:1"), tmp_path / "d")
    e = make_plan(GYM, SandboxBuild(packages=["numpy<2"], imports=["pkg"]), tmp_path / "e")
    assert len({a.image_tag, c.image_tag, d.image_tag, e.image_tag}) == 4
    assert a.venv_name == d.venv_name  # the base image is not an input of the venv
    assert a.venv_name.startswith("cartpole-v1-")


def test_SBX7_runtime_parameters_are_not_hash_inputs(tmp_path: Path) -> None:
    plan = make_plan(GYM, SandboxBuild(), tmp_path)
    tag = plan.image_tag
    spec1 = plan.bootstrap_spec(
        kwargs={"x": 1}, num_envs=4, vectorization_mode="sync", source_dir=None
    )
    spec2 = plan.bootstrap_spec(kwargs={}, num_envs=1, vectorization_mode=None, source_dir=None)
    assert spec1 != spec2 and plan.image_tag == tag
    identity = str(plan.identity("docker"))
    assert "num_envs" not in identity and "kwargs" not in identity


def test_SBX12_bootstrap_spec_carries_the_gym_spec(tmp_path: Path) -> None:
    plan = make_plan(GYM, SandboxBuild(imports=["ale_py"]), tmp_path)
    spec = plan.bootstrap_spec(
        kwargs={"render_mode": "rgb_array"}, num_envs=2, vectorization_mode=None, source_dir=None
    )
    assert spec == {
        "spec": {
            "kind": "gym",
            "env_id": "CartPole-v1",
            "imports": ["ale_py"],
            "kwargs": {"render_mode": "rgb_array"},
            "num_envs": 2,
            "vectorization_mode": None,
        }
    }


def test_SBX8_generated_dockerfile(tmp_path: Path) -> None:
    plan = make_plan(
        GYM,
        SandboxBuild(base_image="base:1", packages=["box2d-py", "weird name;rm -rf /"]),
        tmp_path,
    )
    text = plan.dockerfile(with_wheel=True, with_certs=False)
    lines = text.splitlines()
    assert lines[0] == "FROM base:1"
    assert "RLMESH_PORT=50051" in text and "PYTHONUNBUFFERED=1" in text
    assert "WORKDIR /opt/rlmesh" in lines and "COPY packages /opt/rlmesh/packages" in lines
    run = next(line for line in lines if line.startswith("RUN "))
    assert f"/opt/rlmesh/packages/rlmesh-{rlmesh.__version__}-py3-none-any.whl" in run
    assert "--no-cache-dir" in run and "gymnasium" in run
    assert (
        "'\"'\"'weird name;rm -rf /'\"'\"'" in run
    )  # quoted twice: for the inner sh and for RUN sh -c
    assert "EXPOSE 50051" in lines
    assert lines[-1] == 'ENTRYPOINT ["python3", "-m", "rlmesh.sandbox._bootstrap"]'


def test_SBX8_a_pinned_gymnasium_replaces_the_default_one(tmp_path: Path) -> None:
    plan = make_plan(GYM, SandboxBuild(packages=["Gymnasium==1.0.0"]), tmp_path)
    assert plan.requirements("W") == ["W", "Gymnasium==1.0.0"]
    assert make_plan(GYM, SandboxBuild(), tmp_path).requirements("W") == ["W", "gymnasium"]


def test_SBX9_a_wheel_path_is_injected_and_hashed(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w")
    plan = make_plan(GYM, SandboxBuild(rlmesh_package=str(wheel)), tmp_path / "p")
    assert (
        plan.wheel == wheel and plan.wheel_sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    )
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    plan.write_context(ctx)
    assert (ctx / "packages" / wheel.name).is_file() and (ctx / "Dockerfile").is_file()
    with pytest.raises(FileNotFoundError):
        make_plan(GYM, SandboxBuild(rlmesh_package=str(tmp_path / "missing.whl")), tmp_path)


def test_SBX10_hf_sources_need_trust_remote_code(tmp_path: Path) -> None:
    src = Source("hf://org/repo@" + "a" * 40, "hf", "org/repo@" + "a" * 40)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        make_plan(src, SandboxBuild(), tmp_path)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("off", None),
        ("None", None),
        ("unbounded", None),
        ("8g", "8g"),
        ("512M", "512m"),
    ],
)
def test_SBX11_build_memory(raw: str | None, expected: str | None) -> None:
    assert parse_build_memory(raw) == expected


def test_SBX11_build_memory_auto_and_bad() -> None:
    auto = parse_build_memory("auto")
    assert auto is not None and auto.endswith("g") and int(auto[:-1]) >= 4
    with pytest.raises(ValueError, match="build_memory"):
        parse_build_memory("lots")


@pytest.mark.parametrize(
    ("raw", "slug"),
    [
        ("CartPole-v1", "cartpole-v1"),
        ("ALE/Pong-v5", "ale-pong-v5"),
        ("pkg:Env-v0", "pkg-env-v0"),
        ("///", "env"),
    ],
)
def test_SBX7_slug(raw: str, slug: str) -> None:
    assert sanitize_slug(raw) == slug


def test_SBX9_local_package_files_are_copied_into_the_image_and_hashed_by_content(
    tmp_path: Path,
) -> None:
    extra = tmp_path / "dep-1.0-py3-none-any.whl"
    extra.write_bytes(b"one")
    plan = make_plan(GYM, SandboxBuild(packages=[str(extra), "numpy<2"]), tmp_path / "a")
    assert plan.requirements("W") == [
        "W",
        "gymnasium",
        str(extra),
        "numpy<2",
    ]  # the venv installs the file itself
    assert (
        plan.requirements("W", in_image=True)[2] == "/opt/rlmesh/packages/dep-1.0-py3-none-any.whl"
    )
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    plan.write_context(ctx)
    assert (ctx / "packages" / extra.name).read_bytes() == b"one"
    assert "/opt/rlmesh/packages/dep-1.0-py3-none-any.whl" in (ctx / "Dockerfile").read_text()
    tag = plan.image_tag
    extra.write_bytes(b"two")  # same name, new content: a new identity
    assert (
        make_plan(GYM, SandboxBuild(packages=[str(extra), "numpy<2"]), tmp_path / "b").image_tag
        != tag
    )
