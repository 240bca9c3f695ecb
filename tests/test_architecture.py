"""Guards for the architecture: acyclic layers, one door between the halves, worker state in objects,
and the exported public API."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("orchestrator.tool", "orchestrator.util", "orchestrator._wire", "orchestrator.log", "orchestrator._ids")


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
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
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
                return path[path.index(nxt):] + [nxt]
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
    "orchestrator.util": ["sandbox", "SandboxEnvironment", "ExecResult"],
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

    msg = ChatMessageTool(content="out", tool_call_id="c1", function="bash", error=ToolCallError(type="timeout", message="m"))
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
