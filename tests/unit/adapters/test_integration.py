"""Integration verbs: tag, validate_env_tags, resolve_from_contract, Reader, observation_roles (ADP-134..137)."""

from __future__ import annotations

import types
import warnings
from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A
from rlmesh._contract import EnvContract
from rlmesh.spaces import SpaceSpec

from ._helpers import STD_ACTION_SPACE, resolve_std, std_obs_space, std_output, std_tags


class FakeEnv:
    def __init__(self, metadata: Any = None) -> None:
        gym = pytest.importorskip("gymnasium")
        self.observation_space = gym.spaces.Dict(
            {
                "cam": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "eef_pos": gym.spaces.Box(-1, 1, (3,), np.float32),
                "eef_quat": gym.spaces.Box(-1, 1, (4,), np.float32),
                "gripper": gym.spaces.Box(-1, 1, (2,), np.float32),
                "instruction": gym.spaces.Text(64),
            }
        )
        self.action_space = gym.spaces.Box(-1, 1, (7,), np.float32)
        self.metadata = metadata


def test_tag_validates_and_stamps_a_merged_metadata_copy_ADP_134() -> None:
    original = {"render_modes": []}
    env = FakeEnv(original)
    assert A.tag(env, std_tags()) is env
    assert env.metadata == {"render_modes": [], A.ENV_METADATA_KEY: std_tags().to_dict()}
    assert original == {"render_modes": []}  # the old mapping is not mutated
    assert A.EnvTags.from_metadata(env.metadata) == std_tags()


def test_tag_refuses_bad_tags_and_publishes_nothing_ADP_134() -> None:
    env = FakeEnv({"a": 1})
    bad = A.EnvTags({"nope": A.TextTag(A.INSTRUCTION)}, std_tags().action)
    with pytest.raises(A.AdapterResolutionError, match='observation key "nope"'):
        A.tag(env, bad)
    assert env.metadata == {"a": 1}


def test_tag_needs_spaces_unless_validation_is_off_ADP_134() -> None:
    bare = types.SimpleNamespace(metadata=None)
    with pytest.raises(A.AdapterResolutionError, match="validate=False"):
        A.tag(bare, std_tags())
    A.tag(bare, std_tags(), validate=False)
    assert A.ENV_METADATA_KEY in bare.metadata


def test_tag_emits_join_advisories_as_user_warnings_ADP_134() -> None:
    env = FakeEnv()
    tags = A.EnvTags({"gripper": A.StateTag("vendor/grip")}, std_tags().action)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        A.tag(env, tags)
    assert (
        len(caught) == 1
        and issubclass(caught[0].category, UserWarning)
        and "role registry" in str(caught[0].message)
    )


def test_tag_rejects_action_roles_on_observations_DELTA_62() -> None:
    tags = A.EnvTags({"eef_pos": A.StateTag(A.ACTION_DELTA_POS)}, std_tags().action)
    with pytest.raises(A.AdapterResolutionError, match="an action kind"):
        A.tag(FakeEnv(), tags)


def test_validate_env_tags_returns_advisories_for_servers_SRV_20() -> None:
    assert A.validate_env_tags(std_tags(), std_obs_space(), STD_ACTION_SPACE) == []
    advs = A.validate_env_tags(
        std_tags().to_dict(), FakeEnv().observation_space, FakeEnv().action_space
    )
    assert advs == []
    with pytest.raises(A.AdapterResolutionError):
        A.validate_env_tags(
            {"observation": {"x": {"type": "depth"}}, "action": std_tags().to_dict()["action"]},
            std_obs_space(),
            STD_ACTION_SPACE,
        )


def _contract(metadata: Any) -> Any:
    return types.SimpleNamespace(
        metadata=metadata, observation_space=std_obs_space(), action_space=STD_ACTION_SPACE
    )


def test_resolve_from_contract_reads_raw_tags_from_metadata_ADP_136(
    std_obs: dict[str, Any],
) -> None:
    spec = A.ModelSpec({"t": A.Text(A.INSTRUCTION)}, std_output())
    ad = A.resolve_from_contract(_contract(std_tags().to_metadata()), spec)
    assert ad.transform_obs(std_obs) == {"t": "stack the cups"}


def test_resolve_from_contract_accepts_an_rlmesh_env_contract() -> None:
    obs = SpaceSpec._dict({"p": SpaceSpec._box((3,), "float32", -1.0, 1.0)})
    act = SpaceSpec._box((1,), "float32", -1.0, 1.0)
    tags = A.EnvTags({"p": A.StateTag(A.EEF_POS)}, A.Action(A.Actuator(A.ACTION_GRIPPER, 1)))
    contract = EnvContract("Toy-v0", obs, act, metadata=tags.to_metadata())
    spec = A.ModelSpec(
        {"s": A.State(A.EEF_POS, range=(0, 2))},
        A.Action(A.Actuator(A.ACTION_GRIPPER, 1, range=(0, 1))),
    )
    ad = A.resolve_from_contract(contract, spec)
    assert ad.transform_obs({"p": np.array([0.0, 1.0, -1.0], np.float32)})["s"].tolist() == [
        1.0,
        2.0,
        0.0,
    ]
    assert ad.transform_action([1.0]).tolist() == [1.0] and ad.transform_action([0.0]).tolist() == [
        -1.0
    ]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            None,
            "env contract carries no adapter tags under 'rlmesh.adapters.v1.env_tags'; serve the env with rlmesh.adapters.tag(...)",
        ),
        ({}, "carries no adapter tags"),
        ({A.ENV_METADATA_KEY: "str"}, "must hold a mapping"),
        (
            {
                A.ENV_METADATA_KEY: {
                    "observation": {},
                    "action": {"components": [], "clip": [float("nan"), 1.0]},
                }
            },
            "not serializable JSON",
        ),
        ({A.ENV_METADATA_KEY: {"observation": {1, 2}, "action": {}}}, "not serializable JSON"),
    ],
)
def test_resolve_from_contract_failures_are_adapter_resolution_errors_ADP_136(
    metadata: Any, message: str
) -> None:
    spec = A.ModelSpec({"t": A.Text(A.INSTRUCTION)}, std_output())
    with pytest.raises(
        A.AdapterResolutionError,
        match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\."),
    ):
        A.resolve_from_contract(_contract(metadata), spec)


def test_resolve_accepts_gymnasium_spaces_specs_and_wrappers_ADP_55(
    std_obs: dict[str, Any],
) -> None:
    env = FakeEnv()
    ad = A.resolve(
        std_tags(),
        env.observation_space,
        env.action_space,
        A.ModelSpec({"s": A.Concat(A.EEF_POS)}, std_output()),
    )
    assert ad.transform_obs(std_obs)["s"].tolist() == pytest.approx([0.1, -0.2, 0.3])
    spec_space = SpaceSpec._dict({"eef_pos": SpaceSpec._box((3,), "float32")})
    wrapper = types.SimpleNamespace(spec=spec_space)
    tags = A.EnvTags({"eef_pos": A.StateTag(A.EEF_POS)}, std_tags().action)
    ad2 = A.resolve(
        tags,
        wrapper,
        SpaceSpec._box((7,), "float32"),
        A.ModelSpec({"s": A.Concat(A.EEF_POS)}, std_output()),
    )
    assert ad2.transform_obs(std_obs)["s"].tolist() == pytest.approx([0.1, -0.2, 0.3])


def test_reader_reads_roles_in_the_env_native_encoding_EVAL_15(std_obs: dict[str, Any]) -> None:
    reader = A.build_reader(
        (std_tags(), std_obs_space(), STD_ACTION_SPACE), A.EEF_ROT, A.IMAGE_PRIMARY, A.INSTRUCTION
    )
    assert reader.roles == (A.EEF_ROT, A.IMAGE_PRIMARY, A.INSTRUCTION)
    out = reader(std_obs)
    assert list(out) == [A.EEF_ROT, A.IMAGE_PRIMARY, A.INSTRUCTION]
    assert out[A.EEF_ROT].tolist() == [0.5, 0.5, 0.5, 0.5]
    assert np.array_equal(out[A.IMAGE_PRIMARY], std_obs["cam"])
    assert out[A.INSTRUCTION] == "stack the cups"


def test_reader_leaves_declare_the_encoding_the_caller_wants_EVAL_15(
    std_obs: dict[str, Any],
) -> None:
    contract = _contract(std_tags().to_metadata())
    reader = A.build_reader(
        contract, A.State(A.EEF_ROT, encoding="axis_angle"), A.Image(A.IMAGE_PRIMARY, layout="chw")
    )
    out = reader(std_obs)
    assert np.allclose(out[A.EEF_ROT], [1.2091995] * 3, atol=1e-6)
    assert out[A.IMAGE_PRIMARY].shape == (3, 8, 8)
    assert np.allclose(reader.read(std_obs, A.EEF_ROT), [1.2091995] * 3, atol=1e-6)


def test_reader_failures_EVAL_15() -> None:
    src = (std_tags(), std_obs_space(), STD_ACTION_SPACE)
    with pytest.raises(TypeError, match="at least one"):
        A.build_reader(src)
    with pytest.raises(TypeError, match="single-role leaves"):
        A.build_reader(src, 3)
    with pytest.raises(A.AdapterResolutionError, match="more than once"):
        A.build_reader(src, A.EEF_POS, A.State(A.EEF_POS))
    with pytest.raises(A.AdapterResolutionError, match="declares no observation role"):
        A.build_reader(src, A.JOINT_POS)
    with pytest.raises(A.AdapterResolutionError, match="publishes no adapter tags"):
        A.build_reader(_contract(None), A.EEF_POS)


def test_observation_roles_from_tags_metadata_or_nothing_EVAL_17() -> None:
    roles = std_tags().observation_roles
    assert A.observation_roles(std_tags()) == roles
    assert A.observation_roles(std_tags().to_metadata()) == roles
    assert A.observation_roles(std_tags().to_dict()) == roles
    assert A.observation_roles(_contract(std_tags().to_metadata())) == roles
    assert A.observation_roles(None) == A.ObservationRoles()
    assert A.observation_roles({"other": 1}) == A.ObservationRoles()
    assert A.observation_roles(_contract(None)) == A.ObservationRoles((), (), ())


def test_wrap_predict_sees_only_the_declared_payload_ADP_137(std_obs: dict[str, Any]) -> None:
    seen: list[Any] = []
    ad = resolve_std({"s": A.Concat(A.EEF_POS)})

    def predict(payload: Any) -> Any:
        seen.append(payload)
        return np.zeros(7)

    action = ad.wrap_predict(predict)(std_obs)
    assert list(seen[0]) == ["s"] and action.shape == (7,)


def test_text_placements_and_serve_route_describe_the_plan() -> None:
    ad = resolve_std(
        {
            "t": A.Text(A.INSTRUCTION, container="list"),
            "x": (A.Text(A.INSTRUCTION),),
            "i": A.Image(A.IMAGE_PRIMARY, stack=2),
        }
    )
    assert ad.text_placements() == ((("t",), "list"), (("x", 0), "str"))
    route = ad.serve_route()
    assert (
        route["stacks"] == {"i": 2}
        and route["model_action_dim"] == 7
        and route["env_action_dim"] == 7
    )
    assert route["referenced_obs_keys"] == ["cam", "instruction"]


def test_adapters_import_nothing_from_transports_or_the_wire() -> None:
    import ast
    from pathlib import Path

    from srctree import parse, walk

    pkg = Path(A.__file__).parent
    for path in pkg.glob("*.py"):
        for node in walk(parse(path)):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
            elif isinstance(node, ast.Import):
                target = ",".join(a.name for a in node.names)
            else:
                continue
            for banned in ("transport", "serve", "client", "wire", "socket"):
                assert banned not in target, f"{path.name} imports {target}"
