"""The examples/factory point-reach factory: describe, build and drive it (keeps the README honest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlmesh._cli.describe import main as describe_main
from rlmesh.authoring import build_env, describe
from rlmesh.params import ParamError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "factory"


@pytest.fixture(scope="module")
def point_reach() -> Any:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import point_reach

        yield point_reach
    finally:
        sys.path.remove(str(EXAMPLE))


def test_the_example_declares_a_ParamSpec_and_two_variants(point_reach: Any) -> None:
    d = describe(point_reach.PointReachFactory, include_runtime=False)
    assert [p["name"] for p in d["params"]["param_spec"]["params"]] == [
        "difficulty",
        "goal",
        "max_steps",
    ]
    assert [v["id"] for v in d["variants"]["catalog"]] == ["easy/center", "hard/corner"]
    assert all("error" not in v for v in d["variants"]["catalog"])
    assert d["env_spec"]["observation_space"]["shape"] == [4]


def test_every_variant_builds_and_runs_an_episode(point_reach: Any) -> None:
    for variant in point_reach.PointReachFactory.enumerate_variants():
        _, env = build_env(point_reach.PointReachFactory, {**variant.params, "max_steps": 20})
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4,) and obs.dtype == np.float32
        for t in range(20):  # noqa: B007 - t is read after the loop
            obs, reward, terminated, truncated, _ = env.step(obs[2:] - obs[:2])
            assert reward <= 0.0
            if terminated or truncated:
                break
        assert terminated or (truncated and t == 19)
        env.close()


def test_the_example_rejects_a_bad_binding_before_building(point_reach: Any) -> None:
    with pytest.raises(ParamError, match="difficulty: 'medium' not in choices"):
        build_env(point_reach.PointReachFactory, {"difficulty": "medium"})


def test_the_readme_summary_matches_the_cli_output(
    point_reach: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert describe_main(["point_reach:PointReachFactory"]) == 0
    out = capfd.readouterr().out.splitlines()
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ rlmesh describe point_reach:PointReachFactory\n", 1)[1].split(
        "\n\n", 1
    )[0]
    assert block.splitlines() == out
