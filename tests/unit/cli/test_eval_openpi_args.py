"""``rlmesh eval`` with an openpi policy server: ``ws://`` as MODEL, ``--model-url``, ``--obs-map``."""

from __future__ import annotations

import pytest

from rlmesh._cli import eval as eval_cli
from rlmesh.openpi import Image, PolicyClient


def test_a_ws_url_is_a_PolicyClient_with_the_obs_map() -> None:
    client = eval_cli.resolve_model_arg(
        "ws://127.0.0.1:8000",
        obs_map=eval_cli._obs_map_arg('{"img": {"image": "pixels", "size": 8}}'),
    )
    assert isinstance(client, PolicyClient)
    assert client.obs_map == {"img": Image("pixels", size=8)}
    with pytest.raises(ValueError, match="--obs-map is for an openpi policy server"):
        eval_cli.resolve_model_arg("random", obs_map={})
    with pytest.raises(ValueError, match="not valid JSON"):
        eval_cli._obs_map_arg("{nope")


def test_model_url_takes_the_model_and_the_one_positional_is_the_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = {}

    def fake_run(model: object, env: object, **kwargs: object) -> object:
        seen["model"], seen["env"] = model, env
        raise RuntimeError("stop here")

    monkeypatch.setattr(eval_cli, "run", fake_run)
    code = eval_cli.main(["--model-url", "ws://127.0.0.1:9", "CartPole-v1", "--no-progress"])
    assert code == 1
    assert isinstance(seen["model"], PolicyClient) and seen["model"].url == "ws://127.0.0.1:9"
    assert eval_cli.main(["ws://127.0.0.1:9", "CartPole-v1", "--model-url", "ws://x:1"]) == 2
    assert eval_cli.main(["ws://127.0.0.1:9"]) == 2  # no ENV
