"""The package imports downward (issue 10 item 4, docs/architecture.md "The layers").

Every module under ``src/rlmesh`` is parsed with :mod:`ast` (nothing is imported), and
its ``import`` statements are resolved (relative ones included) into two graphs:

- **module level**: everything that runs when the module is imported (class bodies,
  ``try`` blocks included; ``if TYPE_CHECKING:`` blocks excluded: they never run);
- **in functions**: imports inside a ``def`` (the lazy ones).

The tests assert that the module-level graph has no cycle (inside a package too), that
every module-level import goes to the same or a lower layer of :data:`LAYERS`, that the
flavour facades are imported only from layer 8, and that the in-function rlmesh imports
are exactly the allow-lists below, each with its reason: a seed-mandated porch
(``Model.run/session/serve/describe/from_config``, ``EnvFactory.serve/describe``,
``RemoteModel.session/run``, a package's lazy ``__getattr__``) or a module that needs an
optional third-party dependency. At most :data:`IN_FUNCTION_BUDGET` in total.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "rlmesh"

#: Layer of every package and top-level module, bottom (1) to top (8). A module takes the
#: layer of its longest listed prefix. Sub-layers order packages that share a storey.
LAYERS: dict[str, float] = {
    # 1 foundations: the data model and the sans-IO protocol
    "rlmesh.errors": 1.0,
    "rlmesh._dtypes": 1.0,
    "rlmesh._keys": 1.0,
    "rlmesh._ids": 1.0,
    "rlmesh._termtext": 1.0,  # term_safe: peer text made harmless for a terminal (issue 28)
    "rlmesh._target": 1.0,  # load_target: the one module:attr / file.py:attr loader (issue 23)
    "rlmesh._build": 1.1,  # editions and versions; wire's handshake reads them
    "rlmesh.tensor": 1.1,
    "rlmesh.types": 1.2,
    "rlmesh._bridge": 1.2,  # the value bridges; spaces sample through them
    "rlmesh.spaces": 1.3,
    "rlmesh.wire": 1.4,
    "rlmesh._plan": 1.5,  # one compiled value plan per space: bridge + spaces + the wire codec
    # 2 I/O and the socket-free adapters
    "rlmesh.transport": 2.0,
    "rlmesh.adapters": 2.0,
    "rlmesh.view": 2.5,  # the live viewer: frames, encoders, backends; it knows nothing of the loop
    # 3 shared upper-storey helpers
    "rlmesh._metadata": 3.0,
    "rlmesh._contract": 3.0,
    "rlmesh.specs": 3.1,
    "rlmesh._envkit": 3.1,  # what an env is, how its results read, the shared checks (below serve/ and eval/)
    # 4 models: Model, contexts, routes (LocalRoute), sentinels, the warning stack level
    "rlmesh.models": 4.0,
    # 5 clients
    "rlmesh.client": 5.0,
    # 6 authoring, then the two users of everything below: serving and evaluation
    "rlmesh.authoring": 6.0,
    "rlmesh.serve": 6.1,
    "rlmesh.eval": 6.2,
    # 7 hooks and backends on top of the loop and the clients
    "rlmesh.recorder": 7.0,
    "rlmesh.sandbox": 7.0,
    "rlmesh.hooks": 7.0,  # ready-made RunHooks (TensorBoard)
    # 8 facades and command lines
    "rlmesh.numpy": 8.0,
    "rlmesh.torch": 8.0,
    "rlmesh.jax": 8.0,
    "rlmesh.gymnasium": 8.0,
    "rlmesh.sb3": 8.0,  # Stable-Baselines3 VecEnv over the fan-out client (issue 26)
    "rlmesh.params": 8.0,
    "rlmesh._describe": 8.0,
    "rlmesh.cli": 8.0,
    "rlmesh._cli": 8.0,  # every command line: one module per command, one dispatcher (issue 23)
    "rlmesh.ray": 8.0,  # env fleets on Ray: actors serving envs; the flavour clients drive them
    "rlmesh": 8.0,  # the root package: it only re-exports
}

#: The flavour facades: only layer 8 may import them (issue 10: eval imports the client).
FACADES = ("rlmesh.numpy", "rlmesh.torch", "rlmesh.jax", "rlmesh.gymnasium")
FACADE_LAYER = 8.0


@dataclass(frozen=True)
class Lazy:
    """One allowed in-function rlmesh import: ``target`` imported inside ``function`` of ``module``."""

    module: str
    function: str
    target: str
    reason: str


#: The upper storey's in-function imports (owned by issue 10 item 4).
ALLOWED: list[Lazy] = [
    Lazy("rlmesh", "__getattr__", "rlmesh.{}", "root lazy __getattr__: rlmesh.numpy/torch/jax/gymnasium load on first use"),
    Lazy("rlmesh.authoring", "__getattr__", "rlmesh.authoring._describe", "AUTH-12: importing authoring does not import describe"),
    Lazy("rlmesh.authoring._factory", "EnvFactory.describe", "rlmesh.authoring._describe", "porch EnvFactory.describe (AUTH-12)"),
    Lazy("rlmesh.authoring._factory", "EnvFactory.serve", "rlmesh.serve", "porch EnvFactory.serve"),
    Lazy("rlmesh.models._base", "ModelBase.from_config", "rlmesh.authoring", "porch Model.from_config (params)"),
    Lazy("rlmesh.models._base", "ModelBase.session", "rlmesh.eval._api", "porch Model.session"),
    Lazy("rlmesh.models._base", "ModelBase.run", "rlmesh.eval._api", "porch Model.run"),
    Lazy("rlmesh.models._base", "ModelBase.serve", "rlmesh.serve", "porch Model.serve"),
    Lazy("rlmesh.models._base", "ModelBase.describe", "rlmesh.authoring", "porch Model.describe"),
    Lazy("rlmesh.client._model", "RemoteModel.session", "rlmesh.eval._api", "porch RemoteModel.session"),
    Lazy("rlmesh.client._model", "RemoteModel.run", "rlmesh.eval._api", "porch RemoteModel.run"),
    Lazy("rlmesh.serve._main", "main", "rlmesh._cli.serve_module", "porch rlmesh.serve.main: `python -m rlmesh.serve`'s parser lives with the other command lines (issue 23)"),
    Lazy("rlmesh.serve._server", "EnvServer.__new__", "rlmesh.serve._pool", "EnvServer(target, sessions=N) is a SessionsEnvServer, a subclass defined in serve._pool (issue 25)"),
    Lazy("rlmesh.ray._vector", "_flavour_class", "rlmesh.gymnasium", "optional dependency: a fleet's Gymnasium vector env needs gymnasium; it loads when asked for"),
]

#: The leaf packages' in-function imports (adapters, spaces, view, recorder, sandbox).
LEAF_ALLOWED: list[Lazy] = [
    Lazy(
        "rlmesh.view._open",
        "open_viewer",
        "rlmesh.view._http",
        "optional dependency: the HTTP viewer needs aiohttp (and asyncio/ssl); it loads only when a run asks for it",
    ),
]

#: Whole-project budget of rlmesh imports inside functions (issue 10 "Done when").
IN_FUNCTION_BUDGET = 20
#: This storey's share of the budget (the leaf packages have the other 6).
UPPER_BUDGET = 14
LEAF_PACKAGES = ("rlmesh.adapters", "rlmesh.spaces", "rlmesh.view", "rlmesh.recorder", "rlmesh.sandbox")


# -- the parser --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    function: str | None  # qualified name of the enclosing def; None at module level


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        name, is_package = _module_name(path)
        out[name] = (path, is_package)
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The rlmesh modules one import statement loads (``from pkg import sub`` names ``pkg.sub``)."""
    known = modules()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        target = sub if sub in known else source
        if target not in out:
            out.append(target)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _dynamic_target(call: ast.Call, package: str) -> str | None:
    """``importlib.import_module("rlmesh.x")`` / ``(f".{name}", __name__)`` -> the rlmesh target
    (an f-string's fields become ``{}``)."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        text = arg.value
    elif isinstance(arg, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)
    else:
        return None  # a user's module name (a target string), not an rlmesh module
    if text.startswith("."):
        return package + text  # relative to the calling module's package
    return text if text.split(".")[0] == "rlmesh" else None


def edges(module: str) -> Iterator[Edge]:
    path, is_package = modules()[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, scope: list[str], function: str | None) -> Iterator[Edge]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and function is None and _is_type_checking(child.test):
                for stmt in child.orelse:
                    yield from walk_one(stmt, scope, function)
                continue
            yield from walk_one(child, scope, function)

    def walk_one(child: ast.AST, scope: list[str], function: str | None) -> Iterator[Edge]:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = [*scope, child.name]
            yield from walk(child, inner, ".".join(inner))
        elif isinstance(child, ast.ClassDef):
            yield from walk(child, [*scope, child.name], function)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            for target in _targets(child, module, is_package):
                if target.split(".")[0] == "rlmesh" and target != module:
                    yield Edge(module, target, child.lineno, function)
        else:
            if isinstance(child, ast.Call) and function is not None:
                target = _dynamic_target(child, module if is_package else module.rpartition(".")[0])
                if target is not None:
                    yield Edge(module, target, child.lineno, function)
            yield from walk(child, scope, function)

    yield from walk(tree, [], None)


@cache
def all_edges() -> tuple[Edge, ...]:
    return tuple(e for m in modules() for e in edges(m))


def layer_of(module: str) -> float | None:
    """The layer of ``module``'s longest listed prefix (the root key covers the root alone)."""
    if module == "rlmesh":
        return LAYERS["rlmesh"]
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        layer = LAYERS.get(".".join(parts[:n]))
        if layer is not None:
            return layer
    return None


def _in_function_entries() -> set[tuple[str, str, str]]:
    return {(e.source, e.function, e.target) for e in all_edges() if e.function is not None}


# -- the tests -----------------------------------------------------------------------------------


def test_the_parser_sees_both_kinds_of_import() -> None:
    """A sanity check that the scan is not vacuous (a test that cannot fail is no test)."""
    found = all_edges()
    assert any(e.source == "rlmesh.eval._api" and e.target == "rlmesh.models._route" and e.function is None for e in found)
    assert any(e.source == "rlmesh.models._base" and e.function == "ModelBase.run" for e in found)
    assert any(e.source == "rlmesh" and e.target == "rlmesh.{}" for e in found)  # the dynamic flavour import
    assert len(modules()) > 150


def test_every_package_and_top_level_module_has_a_layer() -> None:
    missing = sorted(m for m in modules() if layer_of(m) is None)
    assert not missing, (
        f"modules with no layer: {missing}; add the package or top-level module to LAYERS in "
        "tests/unit/test_layering.py (and to docs/architecture.md)"
    )
    stale = sorted(k for k in LAYERS if k not in modules())
    assert not stale, f"LAYERS names modules that no longer exist: {stale}"


def test_module_level_imports_go_down_or_sideways() -> None:
    upward = [
        f"{e.source}:{e.line} (layer {layer_of(e.source)}) imports {e.target} (layer {layer_of(e.target)})"
        for e in all_edges()
        if e.function is None
        and (layer_of(e.source) or 0) < (layer_of(e.target) or 0)
    ]
    assert not upward, "upward imports at module level (move the code down, or import inside a porch):\n" + "\n".join(upward)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes, first == last), or ``None``."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for e in all_edges():
        if e.function is None and e.target in graph:
            graph[e.source].add(e.target)
    return graph


def test_no_module_level_import_cycle() -> None:
    cycle = _cycle(_module_graph())
    assert cycle is None, "module-level import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_only_facades_import_the_flavour_facades() -> None:
    """``eval`` dials with the client, never ``rlmesh.numpy``; nothing below layer 8 reaches a facade."""
    bad = [
        f"{e.source}:{e.line} imports {e.target}" + (f" inside {e.function}" if e.function else "")
        for e in all_edges()
        if any(e.target == f or e.target.startswith(f + ".") for f in FACADES)
        and (layer_of(e.source) or 0) < FACADE_LAYER
    ]
    assert not bad, "a flavour facade imported from below layer 8:\n" + "\n".join(bad)


def test_in_function_imports_are_exactly_the_allow_list() -> None:
    found = _in_function_entries()
    allowed = {(a.module, a.function, a.target) for a in (*ALLOWED, *LEAF_ALLOWED)}
    unlisted = sorted(found - allowed)
    gone = sorted(allowed - found)
    assert not unlisted, (
        "imports inside functions that are not on the allow-list (import at module level, move "
        "the code to the right layer, or - for a porch / optional dependency - list it in "
        f"tests/unit/test_layering.py with a reason): {unlisted}"
    )
    assert not gone, f"allow-list entries that no longer exist (delete them): {gone}"
    assert all(a.reason for a in ALLOWED)


def test_the_upper_storey_keeps_to_its_share_of_the_budget() -> None:
    assert not [a for a in ALLOWED if a.module.startswith(LEAF_PACKAGES)]
    assert len(ALLOWED) <= UPPER_BUDGET, [(a.module, a.function, a.target) for a in ALLOWED]


def test_at_most_20_rlmesh_imports_inside_functions() -> None:
    assert len(ALLOWED) + len(LEAF_ALLOWED) <= IN_FUNCTION_BUDGET
