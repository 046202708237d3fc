"""Entry point inside a sandbox: ``python -m rlmesh.sandbox._bootstrap [bootstrap.json]`` (SBX-12).

The spec comes from ``$RLMESH_BOOTSTRAP_JSON`` (then no argument is allowed) or from a
single ``bootstrap.json`` path argument; a usage error exits 2. ``RLMESH_NUM_ENVS`` /
``RLMESH_VECTORIZATION_MODE`` / ``RLMESH_MAKE_KWARGS`` override the spec;
``RLMESH_SESSIONS=N`` (or ``"sessions"`` in the spec) serves N clients at once, each
env built from the spec in its own worker process (docs/serving.md). The listener
binds only after ``make()`` returns, on ``$RLMESH_ADDRESS`` or ``0.0.0.0:$RLMESH_PORT``;
the bound address goes to ``$RLMESH_READY_FILE`` (when set) and to stdout as
``RLMesh sandbox serving <addr>``.

Kinds: ``gym`` (a Gymnasium id, ``module:attr`` factory or callable, as ``rlmesh
serve`` accepts), ``hf`` (``env.py:make_env(**kwargs)`` of a materialized repo,
returning an env, ``{suite: env}`` or ``{suite: {task: env}}``), ``factory`` (an
``entrypoint`` ``module:Class``). With ``RLMESH_SANDBOX_OWNER_PID`` set (the venv
backend) the server stops when that process is gone, so a crashed owner leaves no
orphan.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._spawn.recipe import load_env_target
from ..serve import EnvServer

__all__ = ["SpecEnvs", "main"]

USAGE = (
    "usage: python -m rlmesh.sandbox._bootstrap [bootstrap.json]  (or set RLMESH_BOOTSTRAP_JSON)"
)


def _load_spec(argv: Sequence[str]) -> dict[str, Any] | None:
    raw = os.environ.get("RLMESH_BOOTSTRAP_JSON")
    if raw:
        if argv:
            return None
        data = json.loads(raw)
    elif len(argv) == 1:
        data = json.loads(Path(argv[0]).read_text())
    else:
        return None
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        raise ValueError("the bootstrap JSON must be an object with a 'spec' object")
    return spec


def _imports(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise ImportError(
                f"sandbox import {name!r} failed ({exc}); add the package that provides it to "
                "SandboxBuild(packages=[...])"
            ) from exc


def _select(obj: Any, suite: str | None, task: str | None) -> Any:
    """SBX-10: pick an env out of ``{suite: env}`` / ``{suite: {task: env}}``."""
    for level, key in (("suite", suite), ("task", task)):
        if not isinstance(obj, dict):
            return obj
        if key is None:
            if len(obj) != 1:
                raise ValueError(
                    f"make_env() returned several {level}s {sorted(obj)}; name one in the hf:// source"
                )
            key = next(iter(obj))
        if key not in obj:
            raise ValueError(f"make_env() has no {level} {key!r}; choose one of {sorted(obj)}")
        obj = obj[key]
    return obj


def _hf_env(spec: dict[str, Any], kwargs: dict[str, Any], num_envs: int) -> Any:
    root = Path(spec.get("source_subdir") or "/opt/rlmesh/source")
    path = root / "env.py"
    if not path.is_file():
        raise FileNotFoundError(f"the hf source has no env.py at {path}")
    sys.path.insert(0, str(root))
    module_spec = importlib.util.spec_from_file_location("rlmesh_sandbox_env", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)

    def one() -> Any:
        return _select(module.make_env(**kwargs), spec.get("suite"), spec.get("task"))

    return one() if num_envs == 1 else [one() for _ in range(num_envs)]


class LaneSeeds:
    """DELTA-26/75: a lane's resets without a seed roll ``base + ordinal`` from its last explicit seed.

    ``info["seed"]`` carries the seed a reset used whenever one is known, so an episode of a
    lane can be replayed on its own.
    """

    MOD = 2**63

    @classmethod
    def wrap(cls, env: Any) -> Any:
        import gymnasium as gym

        class _LaneSeeds(gym.Wrapper):
            def __init__(self, inner: Any) -> None:
                super().__init__(inner)
                self._base: int | None = None
                self._ordinal = 0

            def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
                if seed is not None:
                    self._base, self._ordinal = int(seed), 0
                elif self._base is not None:
                    self._ordinal += 1
                    seed = (self._base + self._ordinal) % cls.MOD
                obs, info = self.env.reset(seed=seed, options=options)
                if seed is not None:
                    info = dict(info)
                    info.setdefault("seed", seed)
                return obs, info

        return _LaneSeeds(env)


def build_target(spec: dict[str, Any]) -> tuple[Any, Any]:
    """``(env_or_lanes, factory)`` for a bootstrap spec, after the env-var overrides."""
    num_envs = int(os.environ.get("RLMESH_NUM_ENVS") or spec.get("num_envs") or 1)
    mode = os.environ.get("RLMESH_VECTORIZATION_MODE") or spec.get("vectorization_mode") or None
    kwargs = dict(spec.get("kwargs") or {})
    extra = os.environ.get("RLMESH_MAKE_KWARGS")
    if extra:
        loaded = json.loads(extra)
        if not isinstance(loaded, dict):
            raise ValueError("RLMESH_MAKE_KWARGS must be a JSON object")
        kwargs.update(loaded)
    _imports(spec.get("imports") or ())
    kind = spec.get("kind", "gym")
    if kind == "gym":
        env, factory = load_env_target(
            str(spec["env_id"]), num_envs=num_envs, vectorization_mode=mode, kwargs=kwargs
        )
        if isinstance(env, list):  # DELTA-26/75: lanes of a gym id get reproducible episode seeds
            env = [LaneSeeds.wrap(lane) for lane in env]
        return env, factory
    if kind == "factory":
        return load_env_target(
            str(spec["entrypoint"]), num_envs=num_envs, vectorization_mode=mode, kwargs=kwargs
        )
    if kind == "hf":
        return _hf_env(spec, kwargs, num_envs), None
    raise ValueError(f"unknown sandbox spec kind {kind!r} (expected gym, hf or factory)")


class SpecEnvs:
    """A bootstrap spec as an env factory (anything with ``make``): each session worker of a
    multi-session sandbox builds its own env from it, and closes what it built."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._factory: Any = None

    def make(self) -> Any:
        env, self._factory = build_target(self.spec)
        return env

    def close(self) -> None:
        factory, self._factory = self._factory, None
        if factory is not None:
            factory.close()


_OWNER_GONE: list[bool] = []


def _watch_owner(owner: int, stop: Any) -> None:
    """Stop serving once the owner process is gone (this process was re-parented).

    A 1 s interval timer, not a thread: the serve loop only offers shared-memory rings
    while it is the sole thread (busy polling would starve another one of the GIL).
    """

    def check(*_: Any) -> None:
        if os.getppid() != owner:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _OWNER_GONE.append(True)
            stop()

    signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, 1.0, 1.0)


def _write_ready(path: str, address: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(address + "\n")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        spec = _load_spec(args)
    except (OSError, ValueError) as exc:
        print(f"rlmesh sandbox: bad bootstrap spec: {exc}", file=sys.stderr)
        return 2
    if spec is None:
        print(USAGE, file=sys.stderr)
        return 2
    address = (
        os.environ.get("RLMESH_ADDRESS") or f"0.0.0.0:{os.environ.get('RLMESH_PORT', '50051')}"
    )
    sessions = int(os.environ.get("RLMESH_SESSIONS") or spec.get("sessions") or 1)
    env: Any = None
    factory: Any = None
    if sessions > 1:  # N sessions, each env built from the spec in its own worker process
        server = EnvServer(
            SpecEnvs(spec),
            address,
            sessions=sessions,
            framework=os.environ.get("RLMESH_FRAMEWORK") or None,
            device=os.environ.get("RLMESH_DEVICE") or None,
        )
    else:
        print("rlmesh sandbox: make() running", file=sys.stderr, flush=True)
        env, factory = build_target(spec)
        server = EnvServer(
            env,
            address,
            framework=os.environ.get("RLMESH_FRAMEWORK") or None,
            device=os.environ.get("RLMESH_DEVICE") or None,
        )

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, name="rlmesh-sandbox-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    owner = os.environ.get("RLMESH_SANDBOX_OWNER_PID")
    if owner and owner.isdigit():
        _watch_owner(int(owner), stop)
    ready = os.environ.get("RLMESH_READY_FILE")
    if ready:
        _write_ready(ready, server.address)
    print(f"RLMesh sandbox serving {server.address}", flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        return 130
    finally:
        if factory is not None:
            factory.close()
        if _OWNER_GONE and ready:  # nobody is left to remove our run directory (socket, log)
            import shutil

            shutil.rmtree(os.path.dirname(ready), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
