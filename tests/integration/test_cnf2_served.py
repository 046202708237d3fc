"""Conformance round 2 over real sockets: CNF2-A3, A5..A9, B1, B7, B8 (spec/conformance-2.md).

Servers bind port 0 on loopback; ``python -m rlmesh.serve`` runs in child processes
whose stderr goes to a file, and usage errors are checked in-process through
``rlmesh.serve.main(argv)``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.adapters as A
import rlmesh.numpy as rnp
from conftest import SERVER_START_SECONDS, child_env, stop_process, wait_for_ready_file
from rlmesh.serve import EnvServer, ModelServer

pytestmark = pytest.mark.slow  # child processes or video encoding

# -- CNF2-A3: vector reset seeds reach the env in the caller's form -----------------------


class SeedRecordingVectorEnv(gym.vector.SyncVectorEnv):
    """A Gymnasium vector env that records the ``seed`` argument of every reset."""

    seeds: list[Any]

    def __init__(self, n: int) -> None:
        super().__init__([lambda: gym.make("CartPole-v1") for _ in range(n)])
        self.seeds = []

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        self.seeds.append(seed)
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize(
    ("given", "expected"),
    [([7, 8, 9], [7, 8, 9]), ([9, 3, 5], [9, 3, 5]), (7, 7)],
    ids=["consecutive-list", "list", "int"],
)
def test_cnf2_a3_vector_reset_seed_reaches_the_env_as_given(
    serve, given: Any, expected: Any
) -> None:
    env = SeedRecordingVectorEnv(3)
    server = serve(env)
    with rnp.RemoteVectorEnv(server.address) as client:
        client.reset(seed=given)
    assert env.seeds == [expected]
    assert type(env.seeds[0]) is type(expected)  # a list stays a list, an int stays an int


# -- CNF2-A5 / A6: served-model session checks --------------------------------------------


class Zero(rnp.Model):
    def predict(self, obs: Any) -> int:
        return 0


class ContractOnly:
    """Exposes only ``env_contract`` (no reset/step)."""

    env_contract = None


@pytest.mark.parametrize(
    "env", [object(), ContractOnly(), "127.0.0.1:1"], ids=["object", "contract-only", "address"]
)
def test_cnf2_a5_instruction_is_refused_before_the_env_is_looked_at(env: Any) -> None:
    handle = rlmesh.RemoteModel("127.0.0.1:1")  # never dialed
    with pytest.raises(ValueError, match="instruction= is not supported"):
        handle.session(env, instruction="pick up the cube")
    with pytest.raises(ValueError, match="instruction= is not supported"):
        rlmesh.session(handle, env, instruction="pick up the cube")
    with pytest.raises(ValueError, match="instruction= is not supported"):
        rlmesh.run(handle, env, instruction="pick up the cube")


@pytest.mark.parametrize("trust", [True, False])
@pytest.mark.parametrize("env", [object(), ContractOnly()], ids=["object", "contract-only"])
def test_cnf2_a5_trust_entrypoints_is_refused_for_served_models(env: Any, trust: bool) -> None:
    handle = rlmesh.RemoteModel("127.0.0.1:1")
    for call in (
        handle.session,
        lambda e, **kw: rlmesh.session(handle, e, **kw),
        lambda e, **kw: rlmesh.run(handle, e, **kw),
    ):
        with pytest.raises(ValueError, match="trust_entrypoints= applies to local models"):
            call(env, trust_entrypoints=trust)


def test_cnf2_a5_trust_entrypoints_never_travels_in_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmesh.client import _model as client_model
    from rlmesh.wire import messages as m

    sent: list[Any] = []
    real = client_model.RemoteRoute._request

    def spy(self: Any, msg: Any, segments: Any = ()) -> Any:
        sent.append(msg)
        return real(self, msg, segments)

    monkeypatch.setattr(client_model.RemoteRoute, "_request", spy)
    server = ModelServer(Zero(), "127.0.0.1:0").start()
    try:
        rlmesh.RemoteModel(server.address).run(
            gym.make("CartPole-v1"), max_episodes=1, max_episode_steps=2
        )
    finally:
        server.shutdown()
    binds = [msg for msg in sent if isinstance(msg, m.Bind)]
    assert binds and all(b.trust_entrypoints is None for b in binds)


def test_cnf2_a6_a_bad_env_for_a_served_model_names_env_contract() -> None:
    handle = rlmesh.RemoteModel("127.0.0.1:1")
    for call in (
        handle.session,
        lambda e: rlmesh.session(handle, e),
        lambda e: rlmesh.run(handle, e),
    ):
        with pytest.raises(TypeError, match="env_contract"):
            call(object())


def test_cnf2_a6_an_env_client_exposing_env_contract_is_accepted(serve) -> None:
    env_server = serve(gym.make("CartPole-v1"))
    model_server = ModelServer(Zero(), "127.0.0.1:0").start()
    try:
        with rnp.RemoteEnv(env_server.address) as client:
            assert client.env_contract is not None
            result = rlmesh.run(
                rlmesh.RemoteModel(model_server.address),
                client,
                max_episodes=1,
                max_episode_steps=3,
            )
        assert result.episodes[0].steps == 3
    finally:
        model_server.shutdown()


# -- CNF2-A7: rlmesh.numpy.RemoteModel -----------------------------------------------------

H = W = 4


class TaggedEnv(gym.Env):  # type: ignore[type-arg]
    """A camera whose pixels equal the step count, a 3-D position; a 2-D action."""

    observation_space = gym.spaces.Dict(
        {
            "cam": gym.spaces.Box(0, 255, (H, W, 3), np.uint8),
            "pos": gym.spaces.Box(-1e6, 1e6, (3,), np.float32),
        }
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self) -> None:
        self.t = 0
        self.actions: list[np.ndarray] = []

    def _obs(self) -> dict[str, Any]:
        return {"cam": np.full((H, W, 3), self.t, np.uint8), "pos": np.full(3, self.t, np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.actions.append(np.asarray(action))
        self.t += 1
        return self._obs(), 0.0, self.t >= 3, False, {}


ENV_TAGS = A.EnvTags(
    {"cam": A.ImageTag(A.IMAGE_PRIMARY), "pos": A.StateTag(A.EEF_POS)},
    A.Action(A.Actuator("x/move", 2)),
)


class StackPolicy(rnp.Model):
    spec = A.ModelSpec(
        {"img": A.Image(A.IMAGE_PRIMARY, stack=2), "state": A.State(A.EEF_POS)},
        A.Action(A.Actuator("x/move", 2)),
    )

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def predict(self, obs: Any) -> Any:
        self.seen.append({k: np.array(v) for k, v in obs.items()})
        return np.full(2, 0.5, np.float32)


def test_cnf2_a7_numpy_remote_model_is_public_and_drives_a_specd_model(serve) -> None:
    assert "RemoteModel" in rnp.__all__ and issubclass(rnp.RemoteModel, rlmesh.RemoteModel)
    env = TaggedEnv()
    env_server = serve(env, tags=ENV_TAGS)
    policy = StackPolicy()
    model_server = ModelServer(policy, "127.0.0.1:0").start()
    try:
        with rlmesh.session(
            rnp.RemoteModel(model_server.address), rnp.RemoteEnv(env_server.address)
        ) as sess:
            sess.run(max_episodes=1)
    finally:
        model_server.shutdown()
    assert len(policy.seen) == 3
    assert set(policy.seen[0]) == {"img", "state"}  # the declared payload keys
    assert all(a.shape == (2,) for a in env.actions)  # the env's own action width
    first, second = policy.seen[0]["img"], policy.seen[1]["img"]
    assert first.shape == (2, H, W, 3)  # a leading stack axis of 2
    assert np.array_equal(first[0], first[1]) and int(first[1].max()) == 0  # first-frame padded
    assert int(second[1].max()) == 1 and np.array_equal(second[0], first[1])  # the window slid


# -- CNF2-B1 / B7 ---------------------------------------------------------------------------


def test_cnf2_b1_wait_before_start_says_so() -> None:
    server = EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0")
    try:
        with pytest.raises(RuntimeError, match="before start"):
            server.wait()
    finally:
        server.shutdown()


def test_cnf2_b7_remote_model_address_is_reported_as_requested() -> None:
    assert rlmesh.RemoteModel("127.0.0.1:5556").address == "127.0.0.1:5556"
    assert rlmesh.RemoteModel(host="127.0.0.1", port=5556).address == "tcp://127.0.0.1:5556"
    assert rnp.RemoteModel("127.0.0.1:5556").address == "127.0.0.1:5556"
    with pytest.raises(ValueError, match="cannot be combined"):
        rlmesh.RemoteModel("127.0.0.1:5556", port=5556)


# -- CNF2-A8 / A9 / B8: serve_env and python -m rlmesh.serve ---------------------------------


def test_cnf2_a8_serve_env_is_public_with_positional_only_source_and_address() -> None:
    import inspect

    sig = inspect.signature(rlmesh.serve.serve_env)
    params = list(sig.parameters.values())
    assert [p.name for p in params[:2]] == ["env_source", "address"]
    assert all(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params[:2])
    assert [p.name for p in params[2:7]] == [
        "num_envs",
        "vectorization_mode",
        "framework",
        "device",
        "workflow_edition",
    ]
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD
    assert "serve_env" in rlmesh.serve.__all__ and "main" in rlmesh.serve.__all__


def test_cnf2_a8_make_parameters_named_address_and_env_source_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    class FakeServer:
        def __init__(self, env: Any, address: str, **kwargs: Any) -> None:
            seen["address"], seen["env"] = address, env
            raise Stop

    def make(address: str, env_source: str) -> Any:
        seen["make"] = (address, env_source)
        return TaggedEnv()

    monkeypatch.setattr(
        "rlmesh.serve._main.EnvServer", FakeServer
    )  # the name serve_env builds with
    with pytest.raises(Stop):
        rlmesh.serve.serve_env(make, "127.0.0.1:0", address="make-addr", env_source="make-src")
    assert seen["make"] == ("make-addr", "make-src") and seen["address"] == "127.0.0.1:0"


def test_cnf2_a8_env_factory_serve_forwards_to_serve_env(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_serve_env(source: Any, address: str, /, **kwargs: Any) -> None:
        calls.append((source, address, kwargs))

    monkeypatch.setattr(rlmesh.serve, "serve_env", fake_serve_env)

    class Factory(rlmesh.EnvFactory):
        def make(self, **kwargs: Any) -> Any:
            return TaggedEnv()

    factory = Factory()
    factory.serve("127.0.0.1:0", num_envs=2, device="cpu", size=3)
    ((source, address, kwargs),) = calls
    assert source is factory and address == "127.0.0.1:0"
    assert kwargs == {
        "num_envs": 2, "vectorization_mode": None, "framework": None, "device": "cpu",
        "workflow_edition": None, "autoreset": None, "size": 3,
    }  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["served_models:Lean", "--framework", "torch"],
        ["served_models:Lean", "--device", "cpu"],
        ["no_such_module_anywhere:Target", "--framework", "numpy"],  # decided before any import
        [],
        ["served_models:Lean", "--env", "CartPole-v1"],
        ["--env", "CartPole-v1", "--kwargs-json", "[1, 2]"],
        ["--env", "CartPole-v1", "--kwargs-json", "{not json"],
        ["served_models:Lean", "--kwargs-json", '"a string"'],
        ["--env", "CartPole-v1", "--kwargs-json", '{"num_envs": 2}'],
        ["--env", "CartPole-v1", "--kwargs-json", '{"device": "cpu"}'],
    ],
)
def test_cnf2_a9_b8_usage_errors_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        rlmesh.serve.main(argv)
    assert info.value.code == 2
    assert "usage: python -m rlmesh.serve" in capsys.readouterr().err


@pytest.mark.parametrize("var", ["RLMESH_FRAMEWORK", "RLMESH_DEVICE"])
def test_cnf2_a9_framework_or_device_from_the_environment_with_a_model_is_a_usage_error(
    var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(var, "torch" if var == "RLMESH_FRAMEWORK" else "cpu")
    with pytest.raises(SystemExit) as info:
        rlmesh.serve.main(["served_models:Lean"])
    assert info.value.code == 2


def test_cnf2_a9_bad_num_envs_variable_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_NUM_ENVS", "two")
    with pytest.raises(SystemExit) as info:
        rlmesh.serve.main(["--env", "CartPole-v1"])
    assert info.value.code == 2


def _spawn(
    short_tmp: Path, name: str, *args: str, **extra_env: str
) -> tuple[subprocess.Popen[bytes], str]:
    ready = short_tmp / f"{name}.ready"
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.serve",
        *args,
        "--address",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]
    with open(short_tmp / f"{name}.err", "wb") as err, open(short_tmp / f"{name}.out", "wb") as out:
        proc = subprocess.Popen(cmd, env=child_env(**extra_env), stdout=out, stderr=err)
    try:
        return proc, wait_for_ready_file(proc, ready, SERVER_START_SECONDS)
    except RuntimeError as exc:
        stop_process(proc)
        raise RuntimeError(
            f"{exc}: {(short_tmp / f'{name}.err').read_text(errors='replace')[-2000:]}"
        ) from None


def test_cnf2_a9_python_m_rlmesh_serve_serves_a_positional_model_and_an_env_with_dash_dash_env(
    short_tmp: Path,
) -> None:
    model_proc, model_addr = _spawn(short_tmp, "model", "served_models:zero")
    env_proc, env_addr = _spawn(
        short_tmp,
        "env",
        "--env",
        "integration_envs:make_countdown",
        "--kwargs-json",
        '{"length": 2}',
    )
    try:
        result = rlmesh.run(rlmesh.RemoteModel(model_addr), env_addr, max_episodes=1)
        assert result.episodes[0].steps == 2  # the countdown env served with its binding
    finally:
        stop_process(model_proc)
        stop_process(env_proc)
    assert (
        "RLMesh serving model on 127.0.0.1:0" in (short_tmp / "model.out").read_text()
    )  # as requested
    assert f"RLMesh serving env on {env_addr}" in (short_tmp / "env.out").read_text()  # as bound


def test_cnf2_a9_rlmesh_num_envs_serves_lanes(short_tmp: Path) -> None:
    proc, address = _spawn(short_tmp, "lanes", "--env", "CartPole-v1", RLMESH_NUM_ENVS="3")
    try:
        with rnp.RemoteVectorEnv(address) as client:
            assert client.num_envs == 3
    finally:
        stop_process(proc)


# -- MOD-37 on a served model with several lanes ---------------------------------------------


class RemembersTheLastInput(rnp.Model):
    def __init__(self) -> None:
        super().__init__()
        self.previous = 0.0

    def predict_chunk(self, obs: Any, execution_horizon: int = 1) -> Any:
        out = np.tanh(float(np.asarray(obs).reshape(-1)[0])) + 0.1 * np.tanh(self.previous)
        self.previous = float(np.asarray(obs).reshape(-1)[0])
        return np.full((execution_horizon, 1), out, np.float32)


def test_mod_37_a_served_stateful_model_fails_a_multi_lane_bind() -> None:
    server = ModelServer(RemembersTheLastInput(), "127.0.0.1:0").start()
    try:
        envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(2)])
        with pytest.raises(rlmesh.errors.ModelError, match="hidden state"):
            rlmesh.run(
                rlmesh.RemoteModel(server.address), envs, max_episodes=2, execution_horizon=2
            )
        one = rlmesh.run(rlmesh.RemoteModel(server.address), gym.make("Pendulum-v1"), max_episodes=1,
                         max_episode_steps=4, execution_horizon=2)  # fmt: skip
        assert one.episodes[0].steps == 4  # a single lane is fine
    finally:
        server.shutdown()
