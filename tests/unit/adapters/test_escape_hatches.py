"""Escape hatches: Custom inputs, CustomEncoding, AdapterBase subclasses, pair overrides (ADP-36..43, ADP-130..133)."""

from __future__ import annotations

import sys
import types
from collections import deque
from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A

from ._helpers import STD_ACTION_SPACE, resolve_std, std_obs_space, std_output, std_tags


def test_custom_transform_receives_the_whole_observation_and_fills_its_slot_ADP_36_101(
    std_obs: dict[str, Any],
) -> None:
    seen: list[Any] = []

    def depth(obs: Any) -> Any:
        seen.append(obs)
        return obs["gripper"].sum()

    ad = resolve_std({"d": A.Custom(transform=depth), "t": A.Text(A.INSTRUCTION)})
    out = ad.transform_obs(std_obs)
    assert out["d"] == pytest.approx(0.0) and out["t"] == "stack the cups"
    assert seen[0] is std_obs
    assert ad.referenced_obs_keys == ("instruction",)  # custom inputs are not counted (ADP-68)


def test_custom_on_a_flat_env_sees_the_obs_envelope() -> None:
    act = A.Action(A.Actuator("x/a", 1))
    ad = A.resolve(A.EnvTags(A.StateTag("x/p"), act), {"kind": "box", "dtype": "float32", "shape": [2]},
                   {"kind": "box", "dtype": "float32", "shape": [1]}, A.ModelSpec({"c": A.Custom(transform=lambda o: list(o))}, act))  # fmt: skip
    assert ad.transform_obs([1.0, 2.0]) == {"c": ["<obs>"]}


def test_entrypoints_import_only_when_trusted_ADP_4_83(std_obs: dict[str, Any]) -> None:
    mod = types.ModuleType("rlmesh_test_entry_mod")
    mod.helpers = types.SimpleNamespace(count=lambda obs: len(obs))  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    try:
        spec_in = {"n": A.Custom(entrypoint="rlmesh_test_entry_mod:helpers.count")}
        with pytest.raises(A.AdapterResolutionError, match="trust_entrypoints") as info:
            resolve_std(spec_in)
        assert info.value.code == "untrusted_entrypoint"
        ad = resolve_std(spec_in, trust_entrypoints=True)
        assert ad.transform_obs(std_obs) == {"n": 5}
    finally:
        del sys.modules[mod.__name__]


def test_resolve_from_contract_passes_trust_through() -> None:
    contract = types.SimpleNamespace(
        metadata=std_tags().to_metadata(),
        observation_space=std_obs_space(),
        action_space=STD_ACTION_SPACE,
    )
    spec = A.ModelSpec({"c": A.Custom(entrypoint="math:fabs")}, std_output())
    with pytest.raises(A.AdapterResolutionError, match="trust_entrypoints"):
        A.resolve_from_contract(contract, spec)
    assert A.resolve_from_contract(contract, spec, trust_entrypoints=True) is not None


class TemporalEnsemble(A.AdapterBase):
    """ACT-style temporal ensembling over action chunks, delegating to a resolved adapter (ADP-132)."""

    def __init__(self, inner: A.Adapter, k: int = 3, tau: float = 0.5) -> None:
        self.inner, self.tau = inner, tau
        self.chunks: deque[np.ndarray] = deque(maxlen=k)

    def transform_obs(self, raw_obs: Any) -> Any:
        return self.inner.transform_obs(raw_obs)

    def transform_action(self, raw_action: Any) -> Any:
        self.chunks.appendleft(np.asarray(raw_action, dtype=np.float64))
        rows = [c[age] for age, c in enumerate(self.chunks) if age < len(c)]
        w = np.exp(-self.tau * np.arange(len(rows)))
        return self.inner.transform_action((np.stack(rows) * w[:, None]).sum(0) / w.sum())

    def reset(self) -> None:
        self.chunks.clear()
        self.inner.reset()


def test_adapter_base_defaults_and_wrap_predict_ADP_131() -> None:
    class Raw(A.AdapterBase):
        def transform_obs(self, raw_obs: Any) -> Any:
            return raw_obs * 2

        def transform_action(self, raw_action: Any) -> Any:
            return raw_action + 1

    raw = Raw()
    assert raw.explain() == raw.describe() == "Raw (custom adapter)"
    assert raw.wrap_predict(lambda x: x * 10)(1) == 21
    assert (
        raw.reset() is None
        and raw.observe(1) is None
        and raw.advisories() == []
        and raw.history_keys() == ()
    )
    with pytest.raises(TypeError):
        A.AdapterBase()  # type: ignore[abstract]


def test_a_stateful_adapter_base_wraps_a_resolved_one_and_resets_ADP_132() -> None:
    inner = resolve_std({"t": A.Text(A.INSTRUCTION)})
    ens = TemporalEnsemble(inner)
    first = ens.transform_action(np.zeros((4, 7)))
    second = ens.transform_action(np.ones((4, 7)))
    assert first.tolist() == [0.0] * 7
    assert 0 < second[0] < 1
    ens.reset()
    assert ens.transform_action(np.ones((4, 7))).tolist() == [1.0] * 7
    assert isinstance(inner, A.AdapterBase) and isinstance(ens, A.AdapterBase)


def test_pair_overrides_are_a_registry_consulted_before_resolve_ADP_133() -> None:
    overrides: dict[tuple[str, str], Any] = {
        ("my-model", "my-env"): lambda: TemporalEnsemble(resolve_std({"t": A.Text(A.INSTRUCTION)}))
    }

    def adapter_for(model: str, env: str) -> A.AdapterBase:
        make = overrides.get((model, env))
        return make() if make else resolve_std({"t": A.Text(A.INSTRUCTION)})

    assert isinstance(adapter_for("my-model", "my-env"), TemporalEnsemble)
    assert isinstance(adapter_for("other", "my-env"), A.Adapter)
    predict = adapter_for("my-model", "my-env").wrap_predict(lambda payload: np.zeros((4, 7)))
    assert predict({"instruction": "go"}).shape == (7,)
