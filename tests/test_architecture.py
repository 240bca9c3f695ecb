"""Guards for the architecture: layers that point down, no import cycles, one door between the halves,
worker state in objects, and the exported public API."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("orchestrator.tool", "orchestrator.util", "orchestrator._wire", "orchestrator.log", "orchestrator._ids",
          "orchestrator._errors")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("workers"), ids=lambda p: str(p.relative_to(ROOT)))
def test_workers_import_only_the_shared_layer(path: Path) -> None:
    bad = {m for m in _imports(path) if m.startswith("orchestrator") and not m.startswith(SHARED)}
    assert not bad, f"{path.relative_to(ROOT)} imports the orchestrator's thinking layer: {sorted(bad)}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PRODUCT = {_module_name(p): p for package in ("orchestrator", "workers") for p in _modules(package)}


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ``modules`` that ``name`` is (or lies in: ``pkg.mod.attr`` -> ``pkg.mod``), else None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs: at module level and inside functions; not under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def module_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the product modules it imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            deps.update(m for m in (_owning_module(t, modules) for t in targets) if m and m != name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (``[a, b, ..., a]``) in ``graph``, or None. Iterative DFS with colours."""
    colour: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if colour.get(start):
            continue
        path: list[str] = [start]
        iters = [iter(sorted(graph[start]))]
        colour[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                iters.pop()
            elif colour.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(graph.get(nxt, ()))))
    return None


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": set()}, None),
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
        ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, None),
    ],
)
def test_find_cycle_table(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_module_graph_counts_function_level_imports_and_not_type_checking(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from . import b\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\nfrom pkg.c import X\n",
        "pkg/c.py": "X = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    modules = {n.removesuffix(".py").replace("/", ".").removesuffix(".__init__"): tmp_path / n for n in files}
    assert module_graph(modules) == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}


def test_no_import_cycles_in_the_product() -> None:
    # Imports inside functions count: a deferred import is still a dependency, and a cycle of them is
    # a circle of modules that cannot be read (or changed) one at a time.
    cycle = find_cycle(module_graph(PRODUCT))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The layers, bottom to top (README's architecture section draws this list). A module may import its own
# package and the packages of the layers below its own; packages sharing a layer may not import each
# other. Imports inside functions count; imports under ``if TYPE_CHECKING:`` do not.
LAYERS: list[tuple[str, ...]] = [
    # the root module holds only __version__
    ("orchestrator", "orchestrator._ids", "orchestrator._glob", "orchestrator._errors"),
    ("orchestrator.util",),
    ("orchestrator.tool",),
    ("orchestrator._wire",),
    ("orchestrator.log",),
    ("workers",),  # of the layers below, imports only SHARED (test_workers_import_only_the_shared_layer)
    ("orchestrator.model", "orchestrator.dispatch", "orchestrator._policy_chain"),
    ("orchestrator.approval", "orchestrator.dataset"),
    ("orchestrator.review", "orchestrator.scorer"),
    ("orchestrator.execute",),
    ("orchestrator.agent",),
    ("orchestrator.solver",),
    ("orchestrator.eval",),
    ("orchestrator.bench",),  # measurements an operator runs against a fleet (toolfleet bench dispatch|fanout)
    ("orchestrator.cli",),
]

# The only imports allowed to point up: public names kept at the path Inspect users import them from,
# and the one method that runs them. Each is imported inside a function, on first use, so loading the
# lower package never loads the higher one. importer: (the package it reaches, the names, why)
LAZY_UPWARD: dict[str, tuple[str, tuple[str, ...], str]] = {
    "orchestrator.model": ("orchestrator.execute", ("ExecuteToolsResult", "execute_tools"),
                           ("Inspect's path (inspect_ai.model.execute_tools) to the engine, which asks "
                            "approvers and reviewers, and those use models")),
    "orchestrator.model._model": ("orchestrator.execute", ("execute_tools",),
                                  "Model.generate_loop (Inspect's API) runs the tool calls it generates"),
}


def package_of(module: str) -> str:
    """The unit layers are made of: ``workers`` is one; in the orchestrator each subpackage and each
    top-level module (``orchestrator.model``, ``orchestrator._wire``) is one, and so is the root."""
    parts = module.split(".")
    return parts[0] if parts[0] == "workers" or len(parts) == 1 else ".".join(parts[:2])


def _layer_name(number: int, layers: list[tuple[str, ...]]) -> str:
    return f"layer {number + 1} ({', '.join(layers[number])})"


def layer_violations(graph: dict[str, set[str]], layers: list[tuple[str, ...]],
                     lazy_upward: dict[str, str] | None = None) -> list[str]:
    """Every import in ``graph`` (module -> modules) that points up or sideways, as one line each;
    ``lazy_upward`` maps an importing module to the one package above it that it may reach."""
    rank = {package: number for number, layer in enumerate(layers) for package in layer}
    found: list[str] = []
    for module in sorted(graph):
        mine = package_of(module)
        if mine not in rank:
            found.append(f"{module}: its package {mine} is in no layer")
            continue
        for dep in sorted(graph[module]):
            theirs = package_of(dep)
            if theirs == mine or (lazy_upward or {}).get(module) == theirs:
                continue
            if theirs not in rank:
                found.append(f"{module} imports {dep}: its package {theirs} is in no layer")
            elif rank[theirs] >= rank[mine]:
                way = "up" if rank[theirs] > rank[mine] else "sideways"
                found.append(f"{module} imports {dep}: {way}, from {_layer_name(rank[mine], layers)} "
                             f"to {_layer_name(rank[theirs], layers)}")
    return found


@pytest.mark.parametrize(
    ("graph", "lazy_upward", "violations"),
    [
        ({"orchestrator.model._a": {"orchestrator.util._b", "orchestrator.model._c"}}, None, []),
        ({"orchestrator.util._b": {"orchestrator.model._a"}}, None,
         [("orchestrator.util._b imports orchestrator.model._a: up, from layer 1 (orchestrator.util) "
           "to layer 3 (orchestrator.model, orchestrator.dispatch)")]),
        ({"orchestrator.model._a": {"orchestrator.dispatch"}}, None,
         [("orchestrator.model._a imports orchestrator.dispatch: sideways, from layer 3 (orchestrator.model, "
           "orchestrator.dispatch) to layer 3 (orchestrator.model, orchestrator.dispatch)")]),
        ({"orchestrator.util": {"orchestrator.model._a"}}, {"orchestrator.util": "orchestrator.model"}, []),
        ({"orchestrator.util._b": {"orchestrator.model._a"}}, {"orchestrator.util": "orchestrator.model"},
         [("orchestrator.util._b imports orchestrator.model._a: up, from layer 1 (orchestrator.util) "
           "to layer 3 (orchestrator.model, orchestrator.dispatch)")]),
        ({"workers.sandbox.x": {"orchestrator.util._b"}, "orchestrator.dispatch": {"workers.y"}}, None, []),
        ({"orchestrator.new._a": {"orchestrator.util"}}, None,
         ["orchestrator.new._a: its package orchestrator.new is in no layer"]),
        ({"workers": {"orchestrator.new"}}, None,
         ["workers imports orchestrator.new: its package orchestrator.new is in no layer"]),
    ],
)
def test_layer_violations_table(graph: dict[str, set[str]], lazy_upward: dict[str, str] | None,
                                violations: list[str]) -> None:
    layers = [("orchestrator.util",), ("workers",), ("orchestrator.model", "orchestrator.dispatch")]
    assert layer_violations(graph, layers, lazy_upward) == violations


def _lazy_upward_packages() -> dict[str, str]:
    return {importer: target for importer, (target, _, _) in LAZY_UPWARD.items()}


def test_imports_point_down_the_layers() -> None:
    violations = layer_violations(module_graph(PRODUCT), LAYERS, _lazy_upward_packages())
    assert not violations, "imports that do not point down the layers (tests/test_architecture.py LAYERS):\n" + \
        "\n".join(violations)


def test_each_package_sits_in_one_layer_and_the_shared_ones_below_workers() -> None:
    placed = [package for layer in LAYERS for package in layer]
    assert len(placed) == len(set(placed)), placed
    rank = {package: number for number, layer in enumerate(LAYERS) for package in layer}
    assert all(rank[package] < rank["workers"] for package in SHARED), SHARED


def test_readme_draws_the_layers_the_test_enforces() -> None:
    # README's architecture section lists the layers top-down as "<number>   <package> · <package>   <note>".
    text = (ROOT / "README.md").read_text()
    block = text[text.index("layer  packages\n"):]
    block = block[:block.index("```")]
    drawn: dict[int, tuple[str, ...]] = {}
    for line in block.splitlines()[1:]:
        number, _, rest = line.strip().partition(" ")
        packages = rest.strip().split("  ")[0]  # a note follows after two spaces or more
        drawn[int(number)] = tuple(packages.split(" · "))
    assert drawn == {number + 1: layer for number, layer in enumerate(LAYERS)}


def package_graph(graph: dict[str, set[str]], lazy_upward: dict[str, str]) -> dict[str, set[str]]:
    """package -> the packages it imports, without the lazy upward references."""
    packages: dict[str, set[str]] = {}
    for module, deps in graph.items():
        mine = package_of(module)
        packages.setdefault(mine, set()).update(
            package_of(d) for d in deps if package_of(d) != mine and lazy_upward.get(module) != package_of(d))
    return packages


def test_no_import_cycles_between_packages() -> None:
    cycle = find_cycle(package_graph(module_graph(PRODUCT), _lazy_upward_packages()))
    assert cycle is None, "package import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("importer", sorted(LAZY_UPWARD))
def test_lazy_upward_imports_are_lazy_and_named(importer: str) -> None:
    target, names, _ = LAZY_UPWARD[importer]
    tree = ast.parse(PRODUCT[importer].read_text())
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    in_functions = {id(node) for function in functions for node in ast.walk(function)}
    upward = [node for node in _import_nodes(tree)
              if package_of(node.module if isinstance(node, ast.ImportFrom) and node.module
                            else node.names[0].name) == target]
    assert upward, f"{importer} no longer reaches {target}: drop it from LAZY_UPWARD"
    for node in upward:
        # Inside a function: loading the importer never loads the package above it.
        assert id(node) in in_functions, f"{importer} imports {target} at load (line {node.lineno})"
        assert isinstance(node, ast.ImportFrom) and {a.name for a in node.names} <= set(names), (
            f"{importer} line {node.lineno} takes more from {target} than LAZY_UPWARD names: {names}")
    if PRODUCT[importer].name == "__init__.py":  # a re-export: the names are the higher package's own
        lower, higher = importlib.import_module(importer), importlib.import_module(target)
        for name in names:
            assert name in lower.__all__ and getattr(lower, name) is getattr(higher, name), name


PUBLIC_PACKAGES = ["tool", "util", "log", "model", "approval", "review", "execute", "agent", "solver", "scorer",
                   "dataset", "eval", "dispatch"]


@pytest.mark.slow  # a fresh interpreter per package
@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_each_public_package_imports_alone(package: str) -> None:
    # No package relies on another having been imported first (nothing like an "isort: skip" import).
    done = subprocess.run([sys.executable, "-c", f"import orchestrator.{package}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("package", ["orchestrator.tool", "orchestrator.util", "orchestrator.log"])
def test_shared_layer_never_imports_workers(package: str) -> None:
    graph = module_graph(PRODUCT)
    for name in (n for n in graph if n == package or n.startswith(package + ".")):
        assert not any(d.split(".")[0] == "workers" for d in graph[name]), name


DOORS = ("orchestrator.dispatch", "orchestrator.cli", "orchestrator.bench")


def test_only_the_door_imports_workers() -> None:
    graph = module_graph(PRODUCT)
    bad = {name: sorted(d for d in deps if d.split(".")[0] == "workers")
           for name, deps in graph.items()
           if name.startswith("orchestrator") and not name.startswith(DOORS)}
    bad = {name: deps for name, deps in bad.items() if deps}
    assert not bad, f"only {', '.join(DOORS)} may import workers: {bad}"


def test_no_isinstance_on_dispatchers_outside_dispatch() -> None:
    for name, path in PRODUCT.items():
        if name.startswith("orchestrator.dispatch"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                text = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                assert "Dispatcher" not in text, f"{path.relative_to(ROOT)}: isinstance(..., {text})"


def _rebound_at_module_level(tree: ast.Module) -> list[str]:
    """Module-level names some function rebinds (``global`` statements)."""
    return [name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names]


@pytest.mark.parametrize(
    ("source", "rebound"),
    [
        ("x = 1\ndef f():\n    global x\n    x = 2\n", ["x"]),
        ("x = {}\ndef f():\n    x['k'] = 2\n", []),
        ("class C:\n    def f(self):\n        self.x = 1\n", []),
    ],
)
def test_rebound_table(source: str, rebound: list[str]) -> None:
    assert _rebound_at_module_level(ast.parse(source)) == rebound


@pytest.mark.parametrize("path", _modules("workers"), ids=lambda p: str(p.relative_to(ROOT)))
def test_workers_keep_no_module_state_rebound_by_functions(path: Path) -> None:
    # Worker state lives in objects the CLI builds and hands down (SandboxHost, WorkerRuntime,
    # Runtimes), so two can be built side by side; never module globals set by setters.
    rebound = _rebound_at_module_level(ast.parse(path.read_text()))
    assert not rebound, f"{path.relative_to(ROOT)} rebinds module state with `global`: {rebound}"


PUBLIC = {
    "orchestrator.tool": ["tool", "Tool", "ToolDef", "ToolInfo", "ToolParams", "ToolCall", "ToolCallError", "ToolError",
                          "ToolResult", "ToolChoice", "ToolFunction", "bash", "python", "text_editor", "bash_session"],
    "orchestrator.model": ["ChatMessageSystem", "ChatMessageUser", "ChatMessageAssistant", "ChatMessageTool",
                           "ModelOutput", "GenerateConfig", "execute_tools", "ExecuteToolsResult"],
    "orchestrator.approval": ["Approval", "Approver", "approver", "ApprovalPolicy", "auto_approver", "human_approver"],
    "orchestrator.review": ["Review", "Reviewer", "reviewer", "ReviewPolicy"],
    "orchestrator.util": ["sandbox", "SandboxEnvironment", "ExecResult", "ToolfleetError", "ControlFlowSignal",
                          "SetupError"],
    "orchestrator.dispatch": ["Dispatcher", "InProcessDispatcher"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_api_is_exported(module: str) -> None:
    mod = importlib.import_module(module)
    for name in PUBLIC[module]:
        assert name in mod.__all__, f"{module}.{name} missing from __all__"
        assert getattr(mod, name) is not None


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_everything_in_all_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        getattr(mod, name)


def test_tool_message_fields() -> None:
    from orchestrator.model import ChatMessageTool
    from orchestrator.tool import ToolCallError

    msg = ChatMessageTool(content="out", tool_call_id="c1", function="bash",
                          error=ToolCallError(type="timeout", message="m"))
    assert (msg.text, msg.tool_call_id, msg.function, msg.error.type) == ("out", "c1", "bash", "timeout")


def _private_workers_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Modules outside ``workers`` -> the private ``workers`` modules they import (a path component
    starting with ``_``), function-level imports included."""
    found: dict[str, list[str]] = {}
    for name, deps in graph.items():
        if name.split(".")[0] == "workers":
            continue
        private = sorted(d for d in deps if d.split(".")[0] == "workers"
                         and any(part.startswith("_") for part in d.split(".")[1:]))
        if private:
            found[name] = private
    return found


def test_nothing_outside_workers_imports_a_private_workers_module() -> None:
    # The worker side's API is what its packages export (``workers.fleet``, ``workers.sandbox``,
    # ``workers.sandbox.docker``) and its public modules (``workers.app``, ``workers.executor``, ...):
    # a private module can then be split or renamed without touching the orchestrator. Tests may
    # still import private modules to table-test a private core (``workers.fleet._leases``).
    sample = {"orchestrator.a": {"workers.fleet", "workers.fleet._auth"}, "orchestrator.b": {"workers.sandbox.docker"},
              "orchestrator.c": {"workers._loop"}, "workers.app": {"workers.fleet._names"}}
    assert _private_workers_imports(sample) == {"orchestrator.a": ["workers.fleet._auth"],
                                                "orchestrator.c": ["workers._loop"]}
    bad = _private_workers_imports(module_graph(PRODUCT))
    assert not bad, f"import private workers modules (use the package's public names): {bad}"
