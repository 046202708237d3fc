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

Issue 23 adds: no import cycle between packages, and no private name (``_x``) of another
package's class used (``obj._x``, ``getattr(obj, "_x")``) or imported (``from ..pkg._m import _f``)
outside that package, except :data:`PRIVATE_ALLOWED` / :data:`PRIVATE_IMPORTS_ALLOWED` (each with a reason).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from srctree import PKG, modules, trees as _trees, walk

#: Layer of every package and top-level module, bottom (1) to top (8). A module takes the
#: layer of its longest listed prefix. Sub-layers order packages that share a storey.
LAYERS: dict[str, float] = {
    # 1 foundations: the data model and the sans-IO protocol
    "rlmesh.errors": 1.0,
    "rlmesh._error_codes": 1.0,  # the wire's error codes, re-exported by rlmesh.errors (issue 34)
    "rlmesh._dtypes": 1.0,
    "rlmesh._keys": 1.0,
    "rlmesh._ids": 1.0,
    "rlmesh._autoreset": 1.0,  # the autoreset modes, one str enum (issue 23)
    "rlmesh._termtext": 1.0,  # term_safe: peer text made harmless for a terminal (issue 28)
    "rlmesh._target": 1.0,  # load_target: the one module:attr / file.py:attr loader (issue 23)
    "rlmesh._gymid": 1.0,  # make_gym_env: finds the package registering a Gymnasium id (issue 35)
    "rlmesh._token": 1.0,  # endpoint tokens: RLMESH_TOKEN, token files, constant-time compare (issue 36)
    "rlmesh._meter": 1.0,  # an endpoint's metric counts: plain integers every serving path bumps (issue 36)
    "rlmesh._argcheck": 1.0,  # check_count, positive_seconds: keyword checks serve, eval and ray share (issue 34)
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
    # the openpi bridge: an rlmesh model on another wire (its client is a Model, its serve loop
    # runs a models route); above models/ and adapters/, which it uses, and below serve/, whose
    # ModelServer(protocol="openpi") hosts that loop; it knows nothing of eval or the clients
    "rlmesh.openpi": 5.5,
    # 6 authoring, then the two users of everything below: serving and evaluation
    "rlmesh.authoring": 6.0,
    # "run it in another process": the env recipe, worker start/stop, Ray start-up (issue 34)
    "rlmesh._spawn": 6.05,
    "rlmesh.serve": 6.1,
    "rlmesh.eval": 6.2,
    # 7 hooks and backends on top of the loop and the clients
    "rlmesh.recorder": 7.0,
    "rlmesh.sandbox": 7.0,
    "rlmesh.hooks": 7.0,  # ready-made RunHooks (TensorBoard)
    # benchmark suites compose eval (run, workers), sandbox and recorder: beside them, on top (issue 35)
    "rlmesh.suites": 7.5,
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
    Lazy(
        "rlmesh",
        "__getattr__",
        "rlmesh.{}",
        "root lazy __getattr__: rlmesh.numpy/torch/jax/gymnasium load on first use",
    ),
    Lazy(
        "rlmesh.authoring",
        "__getattr__",
        "rlmesh.authoring._describe",
        "AUTH-12: importing authoring does not import describe",
    ),
    Lazy(
        "rlmesh.authoring._factory",
        "EnvFactory.describe",
        "rlmesh.authoring._describe",
        "porch EnvFactory.describe (AUTH-12)",
    ),
    Lazy("rlmesh.authoring._factory", "EnvFactory.serve", "rlmesh.serve", "porch EnvFactory.serve"),
    Lazy(
        "rlmesh.models._base",
        "ModelBase.from_config",
        "rlmesh.authoring",
        "porch Model.from_config (params)",
    ),
    Lazy("rlmesh.models._base", "ModelBase.session", "rlmesh.eval._api", "porch Model.session"),
    Lazy("rlmesh.models._base", "ModelBase.run", "rlmesh.eval._api", "porch Model.run"),
    Lazy("rlmesh.models._base", "ModelBase.serve", "rlmesh.serve", "porch Model.serve"),
    Lazy("rlmesh.models._base", "ModelBase.describe", "rlmesh.authoring", "porch Model.describe"),
    Lazy(
        "rlmesh.client._model",
        "RemoteModel.session",
        "rlmesh.eval._api",
        "porch RemoteModel.session",
    ),
    Lazy("rlmesh.client._model", "RemoteModel.run", "rlmesh.eval._api", "porch RemoteModel.run"),
    Lazy(
        "rlmesh.serve._main",
        "main",
        "rlmesh._cli.serve_module",
        "porch rlmesh.serve.main: `python -m rlmesh.serve`'s parser lives with the other command lines (issue 23)",
    ),
    Lazy(
        "rlmesh.ray._vector",
        "_flavour_class",
        "rlmesh.gymnasium",
        "optional dependency: a fleet's Gymnasium vector env needs gymnasium; it loads when asked for",
    ),
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
LEAF_PACKAGES = (
    "rlmesh.adapters",
    "rlmesh.spaces",
    "rlmesh.view",
    "rlmesh.recorder",
    "rlmesh.sandbox",
)


# -- the parser --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    function: str | None  # qualified name of the enclosing def; None at module level


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
    _, is_package = modules()[module]
    tree = _trees()[module]

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
    assert any(
        e.source == "rlmesh.eval._api" and e.target == "rlmesh.models._route" and e.function is None
        for e in found
    )
    assert any(e.source == "rlmesh.models._base" and e.function == "ModelBase.run" for e in found)
    assert any(
        e.source == "rlmesh" and e.target == "rlmesh.{}" for e in found
    )  # the dynamic flavour import
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
        if e.function is None and (layer_of(e.source) or 0) < (layer_of(e.target) or 0)
    ]
    assert not upward, (
        "upward imports at module level (move the code down, or import inside a porch):\n"
        + "\n".join(upward)
    )


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes, first == last), or ``None``."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
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


# -- packages: no cycle between them (issue 23 "Done when") ----------------------------------------


def package_of(module: str) -> str:
    """The unit a module belongs to: its top-level package (``rlmesh.eval._session`` ->
    ``rlmesh.eval``), or the top-level module itself (``rlmesh._bridge``); the root is ``rlmesh``."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for e in all_edges():
        if e.function is None:
            a, b = package_of(e.source), package_of(e.target)
            graph.setdefault(a, set())
            graph.setdefault(b, set())
            if a != b:
                graph[a].add(b)
    return graph


def test_no_package_level_import_cycle() -> None:
    """Collapsed to packages (and top-level modules), the module-level import graph is acyclic:
    a package that needs another must not be needed by it (``eval`` <-> ``view`` was the last one)."""
    cycle = _package_graph()
    found = _cycle(cycle)
    assert found is None, (
        "package-level import cycle: "
        + " -> ".join(found or [])
        + "; move the module that closes the "
        "loop down (or up) so one of the packages no longer imports the other at module level"
    )


# -- private attributes of another package's classes (issue 23 "Done when") ------------------------
#
# A private name is one with a single leading underscore (``_x``; not ``__x__``, not ``_``).
# ``_x`` *belongs to* a package when a class of that package defines it: a ``def``/assignment in
# the class body, a ``__slots__`` entry, or ``self._x = ...`` (also ``cls._x``,
# ``object.__setattr__(self, "_x", ...)``) in one of its methods. A use is ``obj._x`` or
# ``getattr/hasattr/setattr/delattr(obj, "_x")`` on anything but ``self``/``cls``. The check fails
# when a module uses ``_x`` that rlmesh classes define but no class of the module's own package
# does. Without types the receiver is unknown, so a name that the user's package also defines
# passes (precise enough: the common names are not shared), and privates of third-party objects
# (``sys._getframe``, ``os._exit``) are out of scope: no rlmesh class defines them.
#
# Private *functions* imported across packages (``from rlmesh.eval._api import _make_session``) are
# the same coupling and exact under AST, so :func:`test_no_private_name_is_imported_from_another_package`
# checks them too. A private *module* imported across packages (``from ..spaces._spec import
# SpaceSpec``) is how this tree is laid out (every public name lives in a ``_module``), so it is not
# a violation.


@dataclass(frozen=True)
class Reach:
    """One allowed use of another package's private name ``attr`` from ``module``."""

    module: str
    attr: str
    reason: str


def _reaches(modules_: tuple[str, ...], attr: str, reason: str) -> list[Reach]:
    return [Reach(m, attr, reason) for m in modules_]


_SPEC_CODEC = (
    "SpaceSpec's codec internals (the seed fixes SpaceSpec's public surface); the layers that encode, "
    "bridge or describe a space read them"
)
_TENSOR = "Tensor's backing array: the value bridges and checks read it without a copy (hot path, issue 24)"

#: Allowed cross-package private attribute uses (module, attr), each with its reason.
PRIVATE_ALLOWED: list[Reach] = [
    *_reaches(
        (
            "rlmesh._bridge._base",
            "rlmesh._bridge._jax",
            "rlmesh._bridge._torch",
            "rlmesh.spaces._coerce",
        ),
        "_a",
        _TENSOR,
    ),
    Reach(
        "rlmesh._bridge._base",
        "_wrap",
        "Tensor._wrap adopts an array without a copy (the bridges' fast path)",
    ),
    *_reaches(
        (
            "rlmesh._bridge._base",
            "rlmesh.serve._driven",
            "rlmesh.adapters._space_outline",
            "rlmesh.wire.values",
        ),
        "_children",
        _SPEC_CODEC,
    ),
    *_reaches(("rlmesh._contract", "rlmesh.authoring._describe_env"), "_to_dict", _SPEC_CODEC),
    Reach("rlmesh._contract", "_from_dict", _SPEC_CODEC),
    Reach(
        "rlmesh._plan",
        "_plans",
        "the compiled value plans are cached on the SpaceSpec they compile",
    ),
    Reach("rlmesh._plan", "_leaf", "a plan compiles ValueCodec's per-leaf encoder into its own"),
    Reach("rlmesh.adapters._space_outline", "_bounds_arrays", _SPEC_CODEC),
    *_reaches(
        ("rlmesh.client._env", "rlmesh.serve._driver", "rlmesh.wire.values"), "_shape", _SPEC_CODEC
    ),
    Reach(
        "rlmesh.view._sources",
        "_details",
        _SPEC_CODEC + " (duck-typed: the viewer also draws Gymnasium spaces)",
    ),
    Reach(
        "rlmesh.client._session",
        "_timeout",
        "the client's straight step road sets the stream's timeout only when it changed (issue 24: one Python frame per step)",
    ),
    Reach(
        "rlmesh.client._session",
        "_sent_at",
        "the straight step road stamps the busy-poll clock itself (issue 24)",
    ),
    Reach(
        "rlmesh.client._session",
        "_recv_socket",
        "the straight step road reads the reply frame without the ring adapter's extra hop (issue 24)",
    ),
    Reach(
        "rlmesh.eval._api",
        "_corners",
        "rlmesh.run reads a model's implemented predict corners (ModelBase's, duck-typed) to route it",
    ),
    Reach(
        "rlmesh.serve._model",
        "_fire_episode_end",
        "the model endpoint fires the model's episode-end corner as Model.run does",
    ),
    Reach(
        "rlmesh.view._http",
        "_server",
        "aiohttp TCPSite._server (third-party; EnvActor._server shares the name): the bound port of port 0",
    ),
]

#: Allowed private names imported from another package (module, name).
PRIVATE_IMPORTS_ALLOWED: list[Reach] = [
    Reach(
        "rlmesh.client._env",
        "_identity",
        "the value bridges' framework tests, re-exported by rlmesh._bridge for the layers that classify values",
    ),
    Reach(
        "rlmesh.client._session",
        "_advance",
        "the straight step road advances the wire session's state in its own frame (issue 24)",
    ),
    Reach(
        "rlmesh.transport.stream", "_TABLES", "the stream's header parse shares the frame tables"
    ),
    Reach("rlmesh.transport.stream", "_table", "the stream's header parse shares the frame tables"),
    Reach(
        "rlmesh.types", "_NoAdapter", "the public type aliases name the no-adapter sentinel's type"
    ),
]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _assigned_names(target: ast.expr) -> Iterator[ast.expr]:
    yield from (n for n in ast.walk(target) if isinstance(n, (ast.Name, ast.Attribute)))


def _class_defines(cls: ast.ClassDef) -> Iterator[str]:
    """The private names a class defines (its body, ``__slots__``, ``self._x = ...`` in methods)."""
    for st in cls.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield st.name
        targets = (
            st.targets
            if isinstance(st, ast.Assign)
            else [st.target]
            if isinstance(st, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for t in targets:
            yield from (n.id for n in _assigned_names(t) if isinstance(n, ast.Name))
            if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(st, ast.Assign):
                yield from (
                    c.value
                    for c in ast.walk(st.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
            continue
        me = fn.args.args[0].arg
        for n in ast.walk(fn):
            targets = (
                n.targets
                if isinstance(n, ast.Assign)
                else [n.target]
                if isinstance(n, (ast.AnnAssign, ast.AugAssign))
                else []
            )
            for t in targets:
                yield from (
                    a.attr
                    for a in _assigned_names(t)
                    if isinstance(a, ast.Attribute)
                    and isinstance(a.value, ast.Name)
                    and a.value.id == me
                )
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "__setattr__"
                and len(n.args) > 1
                and isinstance(n.args[0], ast.Name)
                and n.args[0].id == me
                and isinstance(n.args[1], ast.Constant)
                and isinstance(n.args[1].value, str)
            ):
                yield n.args[1].value


@cache
def _private_owners() -> dict[str, frozenset[str]]:
    """private name -> the packages whose classes define it."""
    out: dict[str, set[str]] = {}
    for module, tree in _trees().items():
        for cls in (n for n in walk(tree) if isinstance(n, ast.ClassDef)):
            for name in _class_defines(cls):
                if _private(name):
                    out.setdefault(name, set()).add(package_of(module))
    return {k: frozenset(v) for k, v in out.items()}


def _private_uses(module: str) -> Iterator[tuple[int, str]]:
    """``(line, name)`` for every ``obj._x`` / ``getattr(obj, "_x")`` on a receiver other than self/cls."""
    for n in walk(_trees()[module]):
        receiver: ast.expr | None = None
        name = ""
        if isinstance(n, ast.Attribute) and _private(n.attr):
            receiver, name = n.value, n.attr
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(n.args) > 1
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
            and _private(n.args[1].value)
        ):
            receiver, name = n.args[0], n.args[1].value
        if receiver is None or (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")):
            continue
        yield n.lineno, name


def private_reaches() -> list[tuple[str, int, str, frozenset[str]]]:
    """``(module, line, name, owners)``: a private name of another package's class used in ``module``."""
    owners = _private_owners()
    out = []
    for module in _trees():
        for line, name in sorted(_private_uses(module)):
            packages = owners.get(name)
            if packages and package_of(module) not in packages:
                out.append((module, line, name, packages))
    return out


def private_imports() -> list[tuple[str, int, str, str]]:
    """``(module, line, name, source)``: ``from <another package> import _name`` (not a module)."""
    out = []
    for module, tree in _trees().items():
        _, is_package = modules()[module]
        for n in walk(tree):
            if not isinstance(n, ast.ImportFrom):
                continue
            for alias in n.names:
                bare = ast.ImportFrom(module=n.module, names=[alias], level=n.level)
                target = _targets(bare, module, is_package)[0]
                if (
                    _private(alias.name)
                    and target.split(".")[0] == "rlmesh"
                    and package_of(target) != package_of(module)
                    and not target.endswith("." + alias.name)  # a module, not a name in one
                ):
                    out.append((module, n.lineno, alias.name, target))
    return out + _private_module_attributes()


def _private_module_attributes() -> list[tuple[str, int, str, str]]:
    """``(module, line, name, source)``: ``mod._name`` where ``mod`` is another package's module
    bound by an import (``from ..eval import _api`` then ``_api._make_session``)."""
    out = []
    for module, tree in _trees().items():
        _, is_package = modules()[module]
        bound: dict[str, str] = {}
        for n in walk(tree):
            if isinstance(n, ast.Import):
                bound.update(
                    (a.asname, a.name) for a in n.names if a.asname and a.name in modules()
                )
            elif isinstance(n, ast.ImportFrom):
                for alias in n.names:
                    target = _targets(
                        ast.ImportFrom(module=n.module, names=[alias], level=n.level),
                        module,
                        is_package,
                    )[0]
                    if target in modules() and target.endswith("." + alias.name):
                        bound[alias.asname or alias.name] = target
        for n in walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and _private(n.attr):
                source = bound.get(n.value.id)
                if (
                    source
                    and package_of(source) != package_of(module)
                    and f"{source}.{n.attr}" not in modules()
                ):
                    out.append((module, n.lineno, n.attr, source))
    return out


def _check_allowed(
    found: list[tuple[str, int, str, object]], allowed: list[Reach], what: str
) -> None:
    keys = {(a.module, a.attr) for a in allowed}
    bad = [
        f"{m}:{line} uses {name} (defined by {sorted(o) if isinstance(o, frozenset) else o})"
        for m, line, name, o in found
        if (m, name) not in keys
    ]
    assert not bad, (
        f"{what} used from outside its package (add a public method or a function in the owning package, or "
        "list it in tests/unit/test_layering.py with a reason):\n" + "\n".join(bad)
    )
    gone = sorted(keys - {(m, name) for m, _, name, _ in found})
    assert not gone, f"allow-list entries that no longer exist (delete them): {gone}"
    assert all(a.reason for a in allowed)


def test_no_private_attribute_of_another_package_is_used() -> None:
    _check_allowed(
        list(private_reaches()), PRIVATE_ALLOWED, "a private attribute of another package's class"
    )


def test_no_private_name_is_imported_from_another_package() -> None:
    _check_allowed(
        list(private_imports()), PRIVATE_IMPORTS_ALLOWED, "a private name of another package"
    )


def test_the_private_scan_sees_a_reach() -> None:
    """The scan is not vacuous: a planted ``conn._route`` in eval is found, ``self._route`` is not."""
    plant = ast.parse(
        "def f(sess):\n    sess._pending\n    getattr(sess, '_pending')\n    self._pending\n"
    )
    _trees()["rlmesh.eval._probe_plant"] = plant
    try:
        found = [r for r in private_reaches() if r[0] == "rlmesh.eval._probe_plant"]
    finally:
        del _trees()["rlmesh.eval._probe_plant"]
    assert [(line, name) for _, line, name, _ in found] == [(2, "_pending"), (3, "_pending")]
    assert "rlmesh.models" in _private_owners()["_pending"]


def test_the_private_import_scan_sees_both_forms() -> None:
    """``from rlmesh.eval._api import _make_session`` and ``_api._make_session`` from serve are found."""
    plant = ast.parse(
        "from rlmesh.eval._api import _make_session\nfrom rlmesh.eval import _api\n_api._make_session\n"
    )
    _trees()["rlmesh.serve._probe_plant"] = plant
    modules()["rlmesh.serve._probe_plant"] = (PKG / "serve" / "_probe_plant.py", False)
    try:
        found = [
            (line, name, source)
            for m, line, name, source in private_imports()
            if m == "rlmesh.serve._probe_plant"
        ]
    finally:
        del _trees()["rlmesh.serve._probe_plant"]
        del modules()["rlmesh.serve._probe_plant"]
    assert found == [
        (1, "_make_session", "rlmesh.eval._api"),
        (3, "_make_session", "rlmesh.eval._api"),
    ]
