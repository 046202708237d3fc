"""The flavour modules: their names, lazy imports, and what happens without the framework (A.3/A.4, BKD-4/21, MOD-1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rlmesh

pytestmark = pytest.mark.slow  # fresh interpreters: kept out of make test-fast

# api-surface A.3/A.4: each flavour also carries its sandboxed clients and the sandbox re-exports
SANDBOX_NAMES = {
    "SandboxBuild",
    "SandboxEnv",
    "SandboxInfo",
    "SandboxModel",
    "SandboxRuntime",
    "SandboxVectorEnv",
}
TORCH_NAMES = {
    "EnvFactory",
    "Model",
    "RemoteEnv",
    "RemoteModel",
    "RemoteVectorEnv",
    "TorchValue",
    "as_tensor",
    "ensure_available",
    "from_tensor",
    "space_from_spec",
    *SANDBOX_NAMES,
}
JAX_NAMES = {
    "EnvFactory",
    "JaxValue",
    "Model",
    "RemoteEnv",
    "RemoteModel",
    "RemoteVectorEnv",
    "asarray",
    "ensure_available",
    "from_array",
    "space_from_spec",
    *SANDBOX_NAMES,
}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_importing_rlmesh_and_every_flavour_module_imports_neither_torch_nor_jax() -> None:
    """Nothing imports torch or jax unless the user uses that flavour."""
    proc = _run(
        "import sys, rlmesh, rlmesh.numpy, rlmesh.torch, rlmesh.jax\n"
        "rlmesh.torch.RemoteEnv, rlmesh.jax.RemoteVectorEnv, rlmesh.torch.Model, rlmesh.jax.Model\n"
        "print(sorted(m for m in ('torch', 'jax', 'jaxlib') if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_flavours_expose_the_names_of_the_api_surface() -> None:
    import rlmesh.jax as rj
    import rlmesh.torch as rt

    assert set(rt.__all__) == TORCH_NAMES and all(hasattr(rt, n) for n in TORCH_NAMES)
    assert set(rj.__all__) == JAX_NAMES and all(hasattr(rj, n) for n in JAX_NAMES)
    assert rlmesh.torch is rt and rlmesh.jax is rj  # lazy attributes of the package
    assert rt.EnvFactory._bridge == "torch" and rj.EnvFactory._bridge == "jax"


@pytest.mark.parametrize(
    ("module", "extra", "construct"),
    [
        ("torch", "torch", "rt.Model(lambda obs: 0)"),
        ("torch", "torch", "rt.RemoteEnv('127.0.0.1:1')"),
        ("torch", "torch", "rt.ensure_available()"),
        ("jax", "jax", "rj.Model(lambda obs: 0)"),
        ("jax", "jax", "rj.RemoteVectorEnv('127.0.0.1:1')"),
    ],
)
def test_without_the_framework_construction_raises_ImportError_naming_the_extra(
    module: str, extra: str, construct: str
) -> None:
    """MOD-1/BKD-4/CLT-3: the check happens at construction, before any dial."""
    proc = _run(
        f"import sys; sys.modules[{module!r}] = None\n"
        "import rlmesh.torch as rt, rlmesh.jax as rj\n"
        "try:\n"
        f"    {construct}\n"
        "except ImportError as exc:\n"
        "    print('ImportError:', exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError:") and f'"{extra}" extra of rlmesh-py' in proc.stdout


def test_serving_with_an_unknown_framework_or_a_device_without_one_is_a_ValueError() -> None:
    """SRV-30/32."""
    env = _Tiny()
    with pytest.raises(ValueError, match="unknown framework"):
        rlmesh.EnvServer(env, "127.0.0.1:0", framework="mxnet")
    with pytest.raises(ValueError, match="requires a framework with a device"):
        rlmesh.EnvServer(env, "127.0.0.1:0", device="cuda:0")
    with pytest.raises(ValueError, match="requires a framework with a device"):
        rlmesh.EnvServer(env, "127.0.0.1:0", framework="numpy", device="cpu")


class _Tiny:
    observation_space = rlmesh.spaces.Discrete(2)
    action_space = rlmesh.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        return 0, {}

    def step(self, action):  # type: ignore[no-untyped-def]
        return 0, 0.0, False, False, {}

    def close(self) -> None:
        pass
