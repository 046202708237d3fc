"""Adapter conformance vectors (adapters.md section 18), run straight from the shared folder.

Every ``*.json`` in ``$RLMESH_ADAPTER_CASES`` (default: the repo's sibling
``../shared/conformance/adapters-v1/cases``; where that folder is absent, e.g. a
checkout on its own, the byte-identical copy in ``tests/conformance/adapters-v1/cases``)
becomes one test, id = file stem, so a new vector is picked up with no code change.
The vectors are read-only: never regenerate them from this implementation (section
18.3 step 5).

Each resolve/apply case runs twice: once with Gymnasium spaces built from the
space views and once with the view dicts passed straight to ``resolve``
(ADP-55), exercising both entry points.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlmesh.adapters import AdapterResolutionError, EnvTags, ModelSpec, resolve

_REPO = Path(__file__).resolve().parents[2]
_SHARED = _REPO.parent / "shared" / "conformance" / "adapters-v1" / "cases"
_VENDORED = Path(__file__).resolve().parent / "adapters-v1" / "cases"
CASES_DIR = Path(
    os.environ.get("RLMESH_ADAPTER_CASES") or (_SHARED if _SHARED.is_dir() else _VENDORED)
)
CASES = sorted(CASES_DIR.glob("*.json"))


def space_from_view(view: dict[str, Any]) -> Any:
    """Section 18.3 step 2: a space view -> a Gymnasium space."""
    gym = pytest.importorskip("gymnasium")
    kind = view["kind"]
    if kind == "dict":
        return gym.spaces.Dict(
            {k: space_from_view(c) for k, c in zip(view["keys"], view["children"])}
        )
    if kind == "tuple":
        return gym.spaces.Tuple([space_from_view(c) for c in view["children"]])
    if kind == "text":
        return gym.spaces.Text(max_length=1024)
    if kind == "box":
        dtype = np.dtype(view["dtype"])
        shape = tuple(view.get("shape", ()))
        if "low" in view and "high" in view:
            low, high = np.asarray(view["low"], dtype), np.asarray(view["high"], dtype)
            if low.size == 1:
                low, high = low.reshape(()), high.reshape(())
            return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
        if dtype.kind == "f":
            return gym.spaces.Box(low=-np.inf, high=np.inf, shape=shape, dtype=dtype)
        info = np.iinfo(dtype)
        return gym.spaces.Box(low=info.min, high=info.max, shape=shape, dtype=dtype)
    raise AssertionError(f"unsupported space view kind in a vector: {kind}")


def decode(v: dict[str, Any]) -> Any:
    """Section 18.3 step 3: an encoded value -> the Python value."""
    kind = v["kind"]
    if kind == "array":
        return np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"])
    if kind == "text":
        return v["data"]
    if kind == "list":
        return [decode(x) if isinstance(x, dict) else x for x in v["data"]]
    if kind == "map":
        return {k: decode(x) for k, x in v["data"].items()}
    raise AssertionError(f"unknown encoded value kind {kind}")


def assert_matches(actual: Any, expected: dict[str, Any], atol: float, where: str = "$") -> None:
    """Section 18.2 comparison rules."""
    kind = expected["kind"]
    if kind == "array":
        arr = np.asarray(actual)
        assert str(arr.dtype) == expected["dtype"], (
            f"{where}: dtype {arr.dtype} != {expected['dtype']}"
        )
        assert list(arr.shape) == list(expected["shape"]), (
            f"{where}: shape {arr.shape} != {expected['shape']}"
        )
        want = np.asarray(expected["data"], dtype=np.float64).reshape(expected["shape"])
        diff = np.abs(arr.astype(np.float64) - want)
        assert diff.size == 0 or diff.max() <= atol, (
            f"{where}: max |diff| {diff.max()} > {atol}\n{arr!r}"
        )
    elif kind == "list":
        assert isinstance(actual, list), f"{where}: expected a list, got {type(actual).__name__}"
        assert len(actual) == len(expected["data"]), (
            f"{where}: length {len(actual)} != {len(expected['data'])}"
        )
        for i, (a, e) in enumerate(zip(actual, expected["data"])):
            if isinstance(e, dict):
                assert_matches(a, e, atol, f"{where}[{i}]")
            elif isinstance(e, str):
                assert a == e, f"{where}[{i}]: {a!r} != {e!r}"
            else:
                assert abs(float(a) - float(e)) <= atol, f"{where}[{i}]: {a} != {e}"
    elif kind == "text":
        assert actual == expected["data"], f"{where}: {actual!r} != {expected['data']!r}"
    elif kind == "map":
        assert isinstance(actual, dict), f"{where}: expected a dict, got {type(actual).__name__}"
        assert set(actual) == set(expected["data"]), (
            f"{where}: keys {sorted(actual)} != {sorted(expected['data'])}"
        )
        for k, e in expected["data"].items():
            assert_matches(actual[k], e, atol, f"{where}.{k}")
    else:
        raise AssertionError(f"unknown expected kind {kind}")


def _spaces(case: dict[str, Any], entry: str) -> tuple[Any, Any]:
    if entry == "gymnasium":
        return space_from_view(case["observation_space"]), space_from_view(case["action_space"])
    return case["observation_space"], case["action_space"]


def _run(case: dict[str, Any], entry: str) -> None:
    kind = case["kind"]
    if kind == "serialization":
        cls = EnvTags if case["side"] == "env" else ModelSpec
        assert cls.from_dict(case["doc"]).to_dict() == case["doc"]
        return
    tags = EnvTags.from_dict(case["env_tags"])
    spec = ModelSpec.from_dict(case["model_spec"])
    obs_space, act_space = _spaces(case, entry)
    expect = case["expect"]
    if kind == "resolve" and "error_contains" in expect:
        with pytest.raises(AdapterResolutionError) as info:
            resolve(tags, obs_space, act_space, spec)
        assert expect["error_contains"] in str(info.value)
        return
    adapter = resolve(tags, obs_space, act_space, spec)
    if kind == "resolve":
        assert expect["ok"] is True
        assert adapter.describe() == expect["describe"]
        assert adapter.explain() == expect["describe"]
        return
    assert kind == "apply", f"unknown case kind {kind}"
    atol = float(expect["atol"])
    payload = adapter.transform_obs(decode(case["observation"]))
    assert_matches(payload, expect["payload"], atol, "payload")
    action = adapter.transform_action(decode(case["model_output"]))
    assert_matches(action, expect["action"], atol, "action")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_adapter_conformance_vector(path: Path) -> None:
    case = json.loads(path.read_text())
    for entry in ("gymnasium", "view"):
        _run(case, entry)


def test_conformance_cases_folder_is_found() -> None:
    assert CASES, f"no adapter conformance cases found in {CASES_DIR} (set RLMESH_ADAPTER_CASES)"
