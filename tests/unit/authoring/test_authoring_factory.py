"""EnvFactory: make wrapping, stamping, contract branches, build and serve (AUTH-1..5, DELTA-25/56/57)."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest
from authoring_targets import TinyEnv, TinyFactory

import rlmesh.serve
from rlmesh.authoring import (
    ENV_BRANCH_METADATA_KEY,
    ENV_RESET_OPTIONS_KEY,
    PARAM_METADATA_KEY,
    EnvFactory,
    build_env,
)
from rlmesh.params import MissingParamError, Param, ParamError, ParamSpec, UnknownParamError

ENV_TAGS_KEY = "rlmesh.adapters.v1.env_tags"


@pytest.fixture
def adapters() -> Any:
    mod = pytest.importorskip("rlmesh.adapters")
    if not hasattr(mod, "tag") or not hasattr(mod, "EnvTags"):
        pytest.skip("rlmesh.adapters.tag is not available yet")
    return mod


def tags_for_joints(adapters: Any, dim: int = 2) -> Any:
    return adapters.EnvTags(
        adapters.StateTag(adapters.JOINT_POS),
        adapters.Action(adapters.Actuator(adapters.ACTION_JOINT_POS, dim=dim)),
    )


class SharedMetadataEnv(TinyEnv):
    metadata: dict[str, Any] = {"render_modes": []}  # a class-level dict, as in Gymnasium

    def __init__(self) -> None:
        super().__init__()
        del self.metadata  # fall back to the class attribute


# -- class shape (AUTH-1) ------------------------------------------------------------------------


def test_EnvFactory_is_abstract_and_make_is_required() -> None:
    with pytest.raises(TypeError, match="abstract"):
        EnvFactory()  # type: ignore[abstract]

    class NoMake(EnvFactory):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoMake()  # type: ignore[abstract]


def test_EnvFactory_class_attributes_have_the_documented_defaults() -> None:
    assert EnvFactory.tags is None and EnvFactory.params is None
    assert EnvFactory.tag_params == () and EnvFactory.reset_options == ()
    assert EnvFactory.workflow_edition is None
    assert not hasattr(EnvFactory, "enumerate_variants") and not hasattr(
        EnvFactory, "enumerate_params"
    )


def test_prepare_and_close_are_optional_no_ops() -> None:
    f = TinyFactory()
    assert f.prepare() is None and f.close() is None


def test_params_must_be_a_ParamSpec() -> None:
    with pytest.raises(TypeError, match="params must be a ParamSpec"):

        class Bad(EnvFactory):
            params = [Param("x")]  # type: ignore[assignment]

            def make(self, x: str = "") -> Any: ...


# -- make wrapping and stamping (AUTH-2, DELTA-57) ---------------------------------------------


def test_make_is_wrapped_once_keeping_its_name_and_signature() -> None:
    make = TinyFactory.make
    assert make.__name__ == "make" and make.__rlmesh_stamped__  # type: ignore[attr-defined]
    assert list(inspect.signature(TinyFactory().make).parameters) == ["size", "goal", "label"]

    class Child(TinyFactory):
        pass

    assert Child.make is TinyFactory.make


def test_an_untagged_factory_leaves_env_metadata_alone() -> None:
    env = TinyFactory().make(size=3)
    assert env.metadata == {"label": "tiny"}


def test_reset_options_are_stamped_as_a_list_DELTA_57() -> None:
    class WithTrials(EnvFactory):
        reset_options = ("trial_index",)

        def make(self) -> Any:
            return SharedMetadataEnv()

    env = WithTrials().make()
    assert env.metadata[ENV_RESET_OPTIONS_KEY] == ["trial_index"]
    assert SharedMetadataEnv.metadata == {
        "render_modes": []
    }  # the shared dict was copied, not mutated


def test_reset_options_given_as_a_bare_string_is_a_TypeError_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"write reset_options = \('trial_index',\)"):

        class Bad(EnvFactory):
            reset_options = "trial_index"  # type: ignore[assignment]

            def make(self) -> Any: ...


def test_tags_are_stamped_into_env_metadata_without_validation(adapters: Any) -> None:
    tags = tags_for_joints(
        adapters, dim=7
    )  # TinyEnv's action space is Discrete: not validated here

    class Tagged(EnvFactory):
        def make(self) -> Any:
            return SharedMetadataEnv()

    Tagged.tags = tags
    env = Tagged().make()
    assert env.metadata[ENV_TAGS_KEY] == tags.to_dict()
    assert env.metadata["render_modes"] == []
    assert ENV_TAGS_KEY not in SharedMetadataEnv.metadata


def test_stamping_is_idempotent_when_a_subclass_calls_super_make(adapters: Any) -> None:
    tags = tags_for_joints(adapters)

    class Base(EnvFactory):
        def make(self, size: int = 2) -> Any:
            return TinyEnv(size)

    class Child(Base):
        def make(self, size: int = 2) -> Any:
            env = super().make(size=size)
            env.metadata["child"] = True
            return env

    Base.tags = tags
    env = Child().make()
    assert env.metadata[ENV_TAGS_KEY] == tags.to_dict() and env.metadata["child"] is True


def test_make_returning_a_list_of_lanes_stamps_every_lane() -> None:
    class Lanes(EnvFactory):
        reset_options = ("trial_index",)

        def make(self) -> Any:
            return [TinyEnv(), TinyEnv()]

    assert all(e.metadata[ENV_RESET_OPTIONS_KEY] == ["trial_index"] for e in Lanes().make())


def test_the_factory_framework_pin_rides_on_the_env_DELTA_57() -> None:
    class Pinned(EnvFactory):
        _bridge = "numpy"

        def make(self) -> Any:
            return TinyEnv()

    assert Pinned().make()._rlmesh_bridge == "numpy"


def test_unassignable_metadata_is_a_TypeError_naming_the_env() -> None:
    class Frozen:
        @property
        def metadata(self) -> Any:
            return {}

    class F(EnvFactory):
        reset_options = ("trial_index",)

        def make(self) -> Any:
            return Frozen()

    with pytest.raises(TypeError, match="cannot stamp metadata onto Frozen"):
        F().make()


# -- contract branches (DELTA-56) ----------------------------------------------------------------


def branch_factory(adapters: Any, **overrides: Any) -> type[EnvFactory]:
    joint = tags_for_joints(adapters, 2)
    wide = tags_for_joints(adapters, 3)

    class Branchy(EnvFactory):
        params = ParamSpec(Param("mode", "enum", choices=("joint", "wide")), Param("n", int))
        tag_params = ("mode",)

        @classmethod
        def tags_for(cls, **params: Any) -> Any:
            return joint if params["mode"] == "joint" else wide

        def make(self, mode: str = "joint", n: int = 1) -> Any:
            return TinyEnv(2 if mode == "joint" else 3)

    for k, v in overrides.items():
        setattr(Branchy, k, v)
    return Branchy


def test_tag_params_stamp_the_selected_branch_tags_and_branch_metadata(adapters: Any) -> None:
    F = branch_factory(adapters)
    assert F.tags == F.tags_for(mode="joint")  # the default branch's tags are adopted
    env = F().make(mode="wide")
    assert env.metadata[ENV_TAGS_KEY] == F.tags_for(mode="wide").to_dict()
    assert env.metadata[ENV_BRANCH_METADATA_KEY] == {"mode": "wide"}
    assert F().make().metadata[ENV_BRANCH_METADATA_KEY] == {"mode": "joint"}


def test_a_discriminant_outside_its_choices_is_a_ParamError(adapters: Any) -> None:
    F = branch_factory(adapters)
    with pytest.raises(
        ParamError,
        match=r"Branchy.make\(\) got mode='c', which is not one of the contract discriminant's choices",
    ):
        F().make(mode="c")


def test_tags_for_without_tag_params_is_a_TypeError() -> None:
    with pytest.raises(TypeError, match="overrides tags_for"):

        class F(EnvFactory):
            @classmethod
            def tags_for(cls, **params: Any) -> Any:
                return None

            def make(self) -> Any: ...


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("params = ParamSpec(Param('n', int))", "not a declared Param"),
        ("params = ParamSpec(Param('mode'))", "needs choices"),
    ],
)
def test_tag_params_must_name_declared_params_with_choices(body: str, match: str) -> None:
    ns: dict[str, Any] = {
        "EnvFactory": EnvFactory,
        "ParamSpec": ParamSpec,
        "Param": Param,
        "Any": Any,
    }
    src = f"class F(EnvFactory):\n    {body}\n    tag_params = ('mode',)\n    def make(self, mode='a'): ...\n"
    with pytest.raises(TypeError, match=match):
        exec(src, ns)


def test_tag_params_need_a_make_default_within_the_choices() -> None:
    spec = ParamSpec(Param("mode", "enum", choices=("a", "b")))
    with pytest.raises(TypeError, match="must give tag param 'mode' a default"):

        class NoDefault(EnvFactory):
            params = spec
            tag_params = ("mode",)

            def make(self, mode: str) -> Any: ...

    with pytest.raises(TypeError, match="default mode='z' is not one of its choices"):

        class BadDefault(EnvFactory):
            params = spec
            tag_params = ("mode",)

            def make(self, mode: str = "z") -> Any: ...


def test_more_than_eight_contract_branches_is_a_TypeError() -> None:
    with pytest.raises(TypeError, match="span 9 contract branches; at most 8"):

        class Wide(EnvFactory):
            params = ParamSpec(
                Param("a", int, choices=(1, 2, 3)), Param("b", int, choices=(1, 2, 3))
            )
            tag_params = ("a", "b")

            def make(self, a: int = 1, b: int = 1) -> Any: ...


def test_tags_for_must_return_EnvTags_or_None_consistently(adapters: Any) -> None:
    tags = tags_for_joints(adapters)
    spec = ParamSpec(Param("mode", "enum", choices=("a", "b")))
    with pytest.raises(TypeError, match="expected EnvTags or None"):

        class WrongType(EnvFactory):
            params = spec
            tag_params = ("mode",)

            @classmethod
            def tags_for(cls, **params: Any) -> Any:
                return {"not": "tags"}

            def make(self, mode: str = "a") -> Any: ...

    with pytest.raises(TypeError, match="mixes EnvTags and None"):

        class Mixed(EnvFactory):
            params = spec
            tag_params = ("mode",)

            @classmethod
            def tags_for(cls, **params: Any) -> Any:
                return tags if params["mode"] == "a" else None

            def make(self, mode: str = "a") -> Any: ...


def test_class_tags_must_agree_with_the_default_branch(adapters: Any) -> None:
    other = tags_for_joints(adapters, 5)
    same = tags_for_joints(adapters, 2)
    spec = ParamSpec(Param("mode", "enum", choices=("a", "b")))
    with pytest.raises(TypeError, match="differ from tags_for"):

        class Disagree(EnvFactory):
            params = spec
            tag_params = ("mode",)
            tags = other

            @classmethod
            def tags_for(cls, **params: Any) -> Any:
                return same

            def make(self, mode: str = "a") -> Any: ...


# -- build_env (AUTH-3, AUTH-5, DELTA-25) --------------------------------------------------------


class Recording(EnvFactory):
    params = ParamSpec(Param("size", int, choices=(2, 3)))
    calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")

    def make(self, size: int = 2, label: str = "x") -> Any:
        self.calls.append(f"make:{size}")
        return TinyEnv(size, label)

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    Recording.calls = []


def test_build_env_validates_before_prepare_so_a_bad_binding_builds_nothing() -> None:
    with pytest.raises(ParamError, match=r"Recording.make\(\): size: 5 not in choices"):
        build_env(Recording, {"size": 5})
    with pytest.raises(UnknownParamError, match="'sise'"):
        build_env(Recording, {"sise": 2})
    assert Recording.calls == []


def test_build_env_instantiates_a_class_prepares_makes_and_stamps_the_binding() -> None:
    factory, env = build_env(Recording, {"size": 3.0})
    assert isinstance(factory, Recording) and Recording.calls == ["prepare", "make:3"]
    body = env.metadata[PARAM_METADATA_KEY]
    assert body["binding"] == {"size": 3} and body["validated"] == {"size": True}


def test_build_env_with_an_empty_binding_fails_on_required_params_AUTH_5() -> None:
    class Needs(EnvFactory):
        params = ParamSpec(Param("task", "enum", choices=("a",)))

        def make(self, task: str) -> Any: ...

    with pytest.raises(MissingParamError, match="missing required parameter: 'task'"):
        build_env(Needs)


def test_build_env_makes_independent_lanes_for_num_envs_above_one() -> None:
    _, lanes = build_env(Recording(), {"size": 2}, num_envs=3)
    assert isinstance(lanes, list) and len(lanes) == 3 and len({id(e) for e in lanes}) == 3
    assert Recording.calls == ["prepare", "make:2", "make:2", "make:2"]


@pytest.mark.parametrize(("kwargs", "match"), [({"num_envs": 0}, "num_envs must be an int >= 1"),
                                               ({"num_envs": True}, "num_envs"),
                                               ({"vectorization_mode": "threads"}, "vectorization_mode")])  # fmt: skip
def test_build_env_rejects_bad_serving_options(kwargs: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_env(Recording, **kwargs)


def test_build_env_sync_vectorization_wraps_makes_in_a_gymnasium_vector_env() -> None:
    gym = pytest.importorskip("gymnasium")

    class Cart(EnvFactory):
        def make(self) -> Any:
            return gym.make("CartPole-v1")

    _, env = build_env(Cart, num_envs=2, vectorization_mode="sync")
    try:
        assert isinstance(env, gym.vector.SyncVectorEnv) and env.num_envs == 2
        assert PARAM_METADATA_KEY in env.metadata
    finally:
        env.close()


# -- serve (AUTH-3, CLI-5, DELTA-25) ------------------------------------------------------------


class FakeServer:
    instances: list[FakeServer] = []

    def __init__(self, env: Any, address: str, **kwargs: Any) -> None:
        self.env, self.requested, self.kwargs = env, address, kwargs
        self.address = "tcp://127.0.0.1:5555"
        self.served = False
        FakeServer.instances.append(self)

    def serve(self) -> None:
        self.served = True


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> type[FakeServer]:
    FakeServer.instances = []
    monkeypatch.setattr(
        "rlmesh.serve._main.EnvServer", FakeServer
    )  # the name serve_env builds with
    return FakeServer


def test_serve_builds_publishes_and_serves_then_closes_the_factory(
    fake_server: type[FakeServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(
        "RLMESH_WORKFLOW_EDITION", raising=False
    )  # rung 2 would shadow rung 3 (DELTA-7)
    Recording().serve("127.0.0.1:0", size=3, workflow_edition="2026.06")
    (server,) = fake_server.instances
    assert server.served and server.requested == "127.0.0.1:0"
    assert isinstance(server.env, TinyEnv) and server.env.metadata[PARAM_METADATA_KEY][
        "binding"
    ] == {"size": 3}
    assert server.kwargs["options"].workflow_edition == "2026.06"
    assert server.kwargs["tags"] is None and server.kwargs["device"] is None
    assert Recording.calls == ["prepare", "make:3", "close"]
    assert "RLMesh serving env on tcp://127.0.0.1:5555" in capsys.readouterr().out


def test_serve_rejects_a_bad_binding_before_building_or_binding(
    fake_server: type[FakeServer],
) -> None:
    with pytest.raises(ParamError):
        Recording().serve("127.0.0.1:0", size=9)
    assert fake_server.instances == [] and Recording.calls == []


def test_serve_options_never_reach_make(fake_server: type[FakeServer]) -> None:
    class Greedy(EnvFactory):
        seen: dict[str, Any] = {}

        def make(self, **kwargs: Any) -> Any:
            Greedy.seen = kwargs
            return TinyEnv()

    Greedy().serve("x:1", num_envs=1, vectorization_mode=None, framework=None, device=None,
                   workflow_edition=None, other=1)  # fmt: skip
    assert Greedy.seen == {"other": 1}


def test_serve_with_num_envs_serves_a_list_of_tagged_lanes(
    fake_server: type[FakeServer], adapters: Any
) -> None:
    tags = tags_for_joints(adapters)

    class Tagged(Recording):
        pass

    Tagged.tags = tags
    Tagged().serve("x:1", num_envs=2)
    (server,) = fake_server.instances
    assert isinstance(server.env, list) and len(server.env) == 2
    assert server.kwargs["tags"] is tags


def test_serve_does_not_restamp_class_tags_on_a_tag_params_factory(
    fake_server: type[FakeServer], adapters: Any
) -> None:
    branch_factory(adapters)().serve("x:1", mode="wide")
    (server,) = fake_server.instances
    assert server.kwargs["tags"] is None
    assert server.env.metadata[ENV_BRANCH_METADATA_KEY] == {"mode": "wide"}


def test_serve_refuses_torch_with_a_gymnasium_vector_fan_out(fake_server: type[FakeServer]) -> None:
    with pytest.raises(NotImplementedError, match="drop vectorization_mode"):
        Recording().serve("x:1", num_envs=2, vectorization_mode="sync", framework="torch")
    assert Recording.calls == []


def test_serve_drops_device_unless_the_framework_has_devices(fake_server: type[FakeServer]) -> None:
    Recording().serve("x:1", device="cuda:0")
    assert fake_server.instances[-1].kwargs["device"] is None
    Recording().serve("x:1", framework="torch", device="cuda:0")
    assert fake_server.instances[-1].kwargs["device"] == "cuda:0"


def test_serve_closes_built_envs_and_the_factory_when_the_server_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[TinyEnv] = []

    class Boom:
        def __init__(self, env: Any, *args: Any, **kwargs: Any) -> None:
            built.append(env)
            raise ConnectionError("failed to bind tcp listener")

    monkeypatch.setattr("rlmesh.serve._main.EnvServer", Boom)  # the name serve_env builds with
    with pytest.raises(ConnectionError):
        Recording().serve("x:1")
    assert built[0].closed == 1 and Recording.calls[-1] == "close"


def test_serve_really_serves_a_factory_over_tcp(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end with the real EnvServer: a client resets and steps the factory's env."""
    client_mod = pytest.importorskip("rlmesh.client")
    remote_env = getattr(client_mod, "RemoteEnv", None)
    if remote_env is None:
        pytest.skip("rlmesh.client.RemoteEnv is not available yet")
    real = rlmesh.serve.EnvServer
    started: list[Any] = []
    ready = threading.Event()

    class Recorder(real):  # type: ignore[misc, valid-type]
        def serve(self) -> None:
            started.append(self)
            ready.set()
            super().serve()

    monkeypatch.setattr("rlmesh.serve._main.EnvServer", Recorder)  # the name serve_env builds with
    errors: list[BaseException] = []

    def run() -> None:
        try:
            TinyFactory().serve("127.0.0.1:0", size=3)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)
            ready.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(30), "server did not start"
    assert not errors, errors
    server = started[0]
    try:
        client = remote_env(server.address)
        try:
            assert client.env_contract.observation_space.shape == [3]
            client.reset(seed=1)
            client.step(1)
        finally:
            client.close()
    finally:
        server.shutdown()
        t.join(30)


# -- describe of contract branches (DELTA-53) ---------------------------------------------------


def test_describe_lists_every_contract_branch_default_first(adapters: Any) -> None:
    from rlmesh.authoring import describe

    F = branch_factory(adapters)
    d = describe(F, include_runtime=False)
    contracts = d["env_contracts"]
    assert contracts["discriminants"] == ["mode"]
    default, wide = contracts["branches"]
    assert default == {"params": {"mode": "joint"}, "default": True, "env_tags": d["env_tags"],
                       "env_spec": d["env_spec"]}  # fmt: skip
    assert wide["params"] == {"mode": "wide"} and wide["default"] is False
    assert wide["env_tags"] == F.tags_for(mode="wide").to_dict()
    assert wide["env_spec"]["observation_space"]["shape"] == [3]
    assert list(d).index("env_contracts") == list(d).index("env_tags") + 1


def test_metadata_keys_agree_with_the_adapters_and_eval_modules() -> None:
    adapters = pytest.importorskip("rlmesh.adapters")
    from rlmesh.authoring import _factory

    assert _factory.ENV_METADATA_KEY == adapters.ENV_METADATA_KEY == "rlmesh.adapters.v1.env_tags"
    assert (
        ENV_BRANCH_METADATA_KEY
        == adapters.ENV_BRANCH_METADATA_KEY
        == "rlmesh.adapters.v1.env_branch"
    )
    trial = pytest.importorskip("rlmesh.eval._trial")
    assert ENV_RESET_OPTIONS_KEY == trial.ENV_RESET_OPTIONS_KEY == "rlmesh.env.v1.reset_options"
