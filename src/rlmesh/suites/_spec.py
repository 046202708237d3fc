"""What a suite string names: ``"metaworld:MT10"``, ``"metaworld:reach-v3,push-v3"``, ``"metaworld"``.

A suite is a module with task groups, an env recipe per task, a seed schedule, a scripted
baseline and what a sandbox installs to run it; :class:`Suite` is one selection of its tasks.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import metaworld as _metaworld

__all__ = ["SUITES", "Suite", "SuiteKind", "parse_suite"]


@dataclass(frozen=True)
class SuiteKind:
    """One suite family: its groups of tasks and how to build its pieces."""

    name: str
    groups: dict[str, tuple[str, ...]]
    default_group: str
    all_tasks: tuple[str, ...]
    make_env: Callable[..., Any]  # make_env(task, **params) -> env (module level: picklable)
    scripted: Callable[[str], Any]
    seeds: Callable[[str, int], list[int]]
    modules: tuple[str, ...]  # what must import for the suite to run in this process
    packages: tuple[str, ...]  # what a sandbox installs
    sandbox_source: str  # the env target a sandbox serves (params bind the task)
    instruction: Callable[[str], str]

    def available(self) -> bool:
        """Whether this process can build the suite's envs (its modules are installed)."""
        return all(importlib.util.find_spec(m) is not None for m in self.modules)


METAWORLD = SuiteKind(
    name="metaworld",
    groups={"MT10": _metaworld.MT10, "MT50": _metaworld.MT50, "MT1": _metaworld.MT1_TASKS},
    default_group="MT10",
    all_tasks=_metaworld.MT50,
    make_env=_metaworld.make_env,
    scripted=_metaworld.scripted,
    seeds=_metaworld.seeds,
    modules=("metaworld", "mujoco"),
    packages=_metaworld.PACKAGES,
    sandbox_source="gym://rlmesh.suites.metaworld:MetaWorld",
    instruction=_metaworld.instruction_for,
)

#: The suites this rlmesh knows, by name.
SUITES: dict[str, SuiteKind] = {METAWORLD.name: METAWORLD}


@dataclass(frozen=True)
class Suite:
    """A selection of one suite's tasks (what :func:`parse_suite` returns)."""

    kind: SuiteKind
    tasks: tuple[str, ...]
    label: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.kind.name

    def env(self, task: str, **params: Any) -> functools.partial[Any]:
        """A picklable zero-argument recipe of ``task``'s env (the suite's params, then ``params``)."""
        return functools.partial(self.kind.make_env, task, **{**self.params, **params})

    def seeds(self, task: str, episodes: int) -> list[int]:
        return self.kind.seeds(task, episodes)

    def scripted(self, task: str) -> Any:
        return self.kind.scripted(task)


def parse_suite(
    spec: str | Suite, tasks: Sequence[str] | str | None = None, **params: Any
) -> Suite:
    """``"name[:GROUP | :task,task,...]"`` -> :class:`Suite`; ``tasks`` narrows it further.

    ``params`` (e.g. ``camera="corner"``, ``image_size=224``) go to every task's env.

    >>> parse_suite("metaworld").label
    'metaworld:MT10'
    >>> parse_suite("metaworld:MT50", tasks="reach-v3").tasks
    ('reach-v3',)

    Raises:
        ValueError: an unknown suite, group or task (the message lists what exists).
    """
    if isinstance(spec, Suite):
        base = spec
        params = {**spec.params, **params}
    else:
        name, _, rest = spec.strip().partition(":")
        kind = SUITES.get(name.lower())
        if kind is None:
            raise ValueError(
                f"unknown suite {name!r} in {spec!r}; known suites: {', '.join(sorted(SUITES))} "
                "(e.g. 'metaworld:MT10')"
            )
        rest = rest.strip() or kind.default_group
        group = {g.lower(): g for g in kind.groups}.get(rest.lower())
        if group is not None:
            selected, label = kind.groups[group], f"{kind.name}:{group}"
        else:
            selected = tuple(_tasks(kind, rest.split(","), spec))
            label = f"{kind.name}:{','.join(selected)}"
        base = Suite(kind, tuple(selected), label)
    if tasks is not None:
        wanted = _tasks(base.kind, tasks.split(",") if isinstance(tasks, str) else tasks, spec)
        outside = [t for t in wanted if t not in base.tasks]
        if outside:
            raise ValueError(
                f"--tasks {', '.join(outside)} not in {base.label} (its tasks: {', '.join(base.tasks)})"
            )
        base = Suite(base.kind, tuple(wanted), f"{base.label} [{','.join(wanted)}]")
    return Suite(base.kind, base.tasks, base.label, {**base.params, **params})


def _tasks(kind: SuiteKind, names: Sequence[str], spec: Any) -> list[str]:
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in kind.all_tasks and f"{name}-v3" in kind.all_tasks:
            name = f"{name}-v3"  # "reach" -> "reach-v3"
        if name not in kind.all_tasks:
            raise ValueError(
                f"unknown {kind.name} task {name!r} in {spec!r}; groups: {', '.join(kind.groups)}; "
                f"tasks: {', '.join(kind.all_tasks)}"
            )
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"no tasks selected by {spec!r}")
    return out
