"""Third-party Gymnasium ids are found and served as they are (rlmesh._gymid).

A throw-away package written to ``tmp_path`` registers ``Acme-Sim/Reach-v0`` when imported,
the way ``metaworld`` registers ``Meta-World/MT1``: nothing imports it unless rlmesh finds it.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import require

gym = require("gymnasium")

from rlmesh import _gymid  # noqa: E402
from rlmesh._spawn.recipe import load_env_target  # noqa: E402
from rlmesh.errors import RLMeshException, UnknownEnvId  # noqa: E402


def _package(tmp_path: Path, module: str, env_id: str) -> None:
    """A module that registers ``env_id`` (a CartPole) when imported, on ``sys.path``."""
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            import gymnasium as gym
            IMPORTED = True
            gym.register(id={env_id!r}, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
            """
        )
    )


@pytest.fixture
def ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A unique namespace and module name per test (the registry is process-wide)."""
    tag = uuid.uuid4().hex[:8]
    monkeypatch.syspath_prepend(str(tmp_path))
    out = SimpleNamespace(
        module=f"acmesim{tag}", ns=f"AcmeSim{tag}", path=tmp_path, env_id=f"AcmeSim{tag}/Reach-v0"
    )
    yield out
    gym.registry.pop(out.env_id, None)
    sys.modules.pop(out.module, None)


def test_namespaced_id_imports_the_module_named_after_its_namespace(ns: SimpleNamespace) -> None:
    _package(ns.path, ns.module, ns.env_id)
    assert ns.env_id not in gym.registry
    env = _gymid.make_gym_env(ns.env_id)
    assert env.spec.id == ns.env_id
    assert ns.module in sys.modules
    env.close()


def test_dashed_namespace_maps_to_a_module_without_the_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:8]
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = f"Acme-Sim{tag}/Reach-v0"
    _package(tmp_path, f"acmesim{tag}", env_id)  # like Meta-World -> metaworld
    try:
        assert _gymid.ensure_registered(env_id) == env_id
    finally:
        gym.registry.pop(env_id, None)


def test_module_colon_env_id_spelling_imports_the_module(ns: SimpleNamespace) -> None:
    _package(ns.path, ns.module, ns.env_id)
    assert _gymid.ensure_registered(f"{ns.module}:{ns.env_id}") == ns.env_id


def test_entry_point_plugin_registers_the_id(
    ns: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def register() -> None:
        calls.append("called")
        gym.register(id=ns.env_id, entry_point="gymnasium.envs.classic_control:CartPoleEnv")

    ep = SimpleNamespace(name=ns.ns, load=lambda: register)
    monkeypatch.setattr(_gymid, "_entry_points", lambda _ns: [ep])
    assert _gymid.ensure_registered(ns.env_id) == ns.env_id
    assert calls == ["called"]


def test_unregistered_id_names_both_remedies(ns: SimpleNamespace) -> None:
    with pytest.raises(UnknownEnvId) as info:
        _gymid.make_gym_env(ns.env_id)
    text = str(info.value)
    assert "--import MODULE" in text and f"MODULE:{ns.env_id}" in text
    assert isinstance(info.value, LookupError) and isinstance(info.value, RLMeshException)
    assert info.value.env_id == ns.env_id


def test_module_that_fails_on_its_own_dependency_is_not_hidden(ns: SimpleNamespace) -> None:
    (ns.path / f"{ns.module}.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        _gymid.ensure_registered(ns.env_id)


def test_serving_path_builds_a_namespaced_id_and_its_lanes(ns: SimpleNamespace) -> None:
    _package(ns.path, ns.module, ns.env_id)
    env, factory = load_env_target(ns.env_id)
    assert factory is None and env.spec.id == ns.env_id
    env.close()
    lanes: Any
    lanes, _ = load_env_target(ns.env_id, num_envs=2, vectorization_mode="sync")
    assert lanes.num_envs == 2
    lanes.close()


def test_an_env_spec_is_made_as_gymnasium_makes_it() -> None:
    spec = gym.make("CartPole-v1", max_episode_steps=7).spec
    env = _gymid.make_gym_env(spec)
    assert env.spec.id == "CartPole-v1" and env.spec.max_episode_steps == 7
