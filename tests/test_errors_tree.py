"""The exception tree drawn in ``orchestrator/_errors.py`` is the one the code has.

Every exception class defined in ``orchestrator/`` and ``workers/`` (found by reading every module's
source, then importing it) is under ``ToolfleetError`` or ``ControlFlowSignal``, with exactly the parent
and builtin bases the drawing gives; the drawing names no class that does not exist; the aliases it lists
are the same class, exported where it says; and the names kept from Inspect keep Inspect's builtin bases.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import orchestrator._errors as errors
from orchestrator._errors import ControlFlowSignal, ToolfleetError

ROOT = Path(__file__).resolve().parents[1]
ROOTS = (ToolfleetError, ControlFlowSignal)
# Inspect 0.3.285's class for each name the drawing marks "Inspect".
INSPECT = {
    "ToolError": "inspect_ai.tool._tool",
    "ToolParsingError": "inspect_ai.tool._tool",
    "ToolApprovalError": "inspect_ai.tool._tool",
    "LimitExceededError": "inspect_ai.util._limit",
    "TerminateSampleError": "inspect_ai._util.exception",
    "SandboxUnavailableError": "inspect_ai.util._sandbox.environment",
    "SandboxTimeoutError": "inspect_ai.util._sandbox.events",
    "OutputLimitExceededError": "inspect_ai.util._sandbox.limits",
}

_NODE = re.compile(r"^(?P<prefix>(?:│  |├─ |└─ |   )*)(?P<name>\w+)(?: \((?P<bases>[\w, ]+)\))?"
                   r" {2,}(?P<module>[\w.]+)(?: {2,}(?P<note>.+))?$")
_ALIAS = re.compile(r"^(?P<alias>\w+) += (?P<target>\w+) {2,}(?P<module>[\w.]+)$")


@dataclass(frozen=True)
class Node:
    name: str
    module: str
    parent: str | None  # None: a root
    bases: tuple[str, ...]  # builtin bases drawn beside the parent
    inspect: bool


def _block(doc: str, title: str) -> list[str]:
    """The indented lines of the literal block whose introducing line starts with ``title`` and ends
    with ``::``, without their indent."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title) and line.endswith("::")) + 2
    block: list[str] = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


def parse_tree(lines: list[str]) -> list[Node]:
    """The drawn tree as nodes; a line that does not read as one, or skips a level, is a ValueError."""
    nodes: list[Node] = []
    path: list[str] = []
    for line in lines:
        match = _NODE.match(line)
        if match is None or len(match["prefix"]) % 3:
            raise ValueError(f"not a tree line: {line!r}")
        depth = len(match["prefix"]) // 3
        if depth > len(path):
            raise ValueError(f"skips a level: {line!r}")
        path[depth:] = [match["name"]]
        bases = tuple(b.strip() for b in match["bases"].split(",")) if match["bases"] else ()
        nodes.append(Node(match["name"], match["module"], path[depth - 1] if depth else None, bases,
                          (match["note"] or "").startswith("Inspect")))
    return nodes


def parse_aliases(lines: list[str]) -> list[tuple[str, str, str]]:
    """``(alias, target, module)`` for each alias line."""
    found = []
    for line in lines:
        match = _ALIAS.match(line)
        if match is None:
            raise ValueError(f"not an alias line: {line!r}")
        found.append((match["alias"], match["target"], match["module"]))
    return found


@pytest.mark.parametrize(
    ("lines", "nodes"),
    [
        (["A  m.a", "├─ B (ValueError)  m.b  Inspect; a note", "│  └─ C  m.c", "└─ D  m.d  a note"],
         [Node("A", "m.a", None, (), False), Node("B", "m.b", "A", ("ValueError",), True),
          Node("C", "m.c", "B", (), False), Node("D", "m.d", "A", (), False)]),
        (["A  m", "└─ B (LookupError, RuntimeError)  m", "E  m"],
         [Node("A", "m", None, (), False), Node("B", "m", "A", ("LookupError", "RuntimeError"), False),
          Node("E", "m", None, (), False)]),
    ],
)
def test_parse_tree_table(lines: list[str], nodes: list[Node]) -> None:
    assert parse_tree(lines) == nodes


@pytest.mark.parametrize("lines", [["A m"], ["A  m", "│  │  └─ B  m"], ["A  m", "├─B  m"]])
def test_parse_tree_refuses_what_is_not_a_tree(lines: list[str]) -> None:
    with pytest.raises(ValueError, match=r"not a tree line|skips a level"):
        parse_tree(lines)


def _module_names() -> list[str]:
    names = []
    for path in sorted([*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "workers").rglob("*.py")]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue  # runs the CLI when imported
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _defined_exceptions() -> tuple[dict[tuple[str, str], type[BaseException]], list[str]]:
    """Every exception class a product module defines at module level, by (module, name); and every
    one defined elsewhere (in a function or class body), which the tree cannot name."""
    found: dict[tuple[str, str], type[BaseException]] = {}
    nested: list[str] = []
    for name in _module_names():
        module = importlib.import_module(name)
        tree = ast.parse(Path(module.__file__ or "").read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if id(node) in top:
                cls = getattr(module, node.name)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found[(name, node.name)] = cls
                continue
            for base in node.bases:
                try:
                    value = eval(ast.unparse(base), vars(module))  # noqa: S307 - our own source: names only
                except Exception:  # noqa: BLE001 - a base only its scope defines: not one of ours at module level
                    value = None
                if isinstance(value, type) and issubclass(value, BaseException):
                    nested.append(f"{name}.{node.name} (line {node.lineno})")
    return found, nested


DRAWN = parse_tree(_block(errors.__doc__ or "", "Tree"))
ALIASES = parse_aliases(_block(errors.__doc__ or "", "Aliases"))
FOUND, NESTED = _defined_exceptions()


def test_the_tree_draws_every_exception_class_and_no_other() -> None:
    drawn = {(node.module, node.name) for node in DRAWN}
    assert len(drawn) == len(DRAWN), "a class is drawn twice"
    missing = sorted(f"{m}.{n}" for m, n in set(FOUND) - drawn)
    extra = sorted(f"{m}.{n}" for m, n in drawn - set(FOUND))
    assert not missing, f"exception classes the tree in orchestrator/_errors.py does not draw: {missing}"
    assert not extra, f"the tree in orchestrator/_errors.py draws classes that do not exist: {extra}"


def test_exception_classes_are_defined_at_module_level() -> None:
    assert not NESTED, f"define these at module level, where the tree can name them: {NESTED}"


def test_each_class_has_the_parent_and_builtin_bases_drawn() -> None:
    by_name = {node.name: FOUND[(node.module, node.name)] for node in DRAWN}
    assert {node.name for node in DRAWN if node.parent is None} == {"ToolfleetError", "ControlFlowSignal"}
    for node in DRAWN:
        cls = by_name[node.name]
        parent = (by_name[node.parent],) if node.parent else (Exception,)
        builtin = tuple(getattr(builtins, b) for b in node.bases)
        assert cls.__bases__ == parent + builtin, f"{node.name}: bases {cls.__bases__}, drawn {parent + builtin}"


def test_every_class_is_under_exactly_one_root() -> None:
    for (module, name), cls in FOUND.items():
        if cls in ROOTS:
            continue
        assert issubclass(cls, ToolfleetError) != issubclass(cls, ControlFlowSignal), f"{module}.{name}"


def test_aliases_are_the_same_class_and_exported() -> None:
    by_name = {node.name: FOUND[(node.module, node.name)] for node in DRAWN}
    assert ALIASES
    for alias, target, module_name in ALIASES:
        module = importlib.import_module(module_name)
        assert getattr(module, alias) is by_name[target], f"{module_name}.{alias} is not {target}"
        assert alias in module.__all__, f"{module_name}.{alias} is an alias kept for its users: export it"


@pytest.mark.parametrize("node", [n for n in DRAWN if n.inspect], ids=lambda n: n.name)
def test_names_kept_from_inspect_keep_its_builtin_bases(node: Node) -> None:
    ours = FOUND[(node.module, node.name)]
    theirs = getattr(importlib.import_module(INSPECT[node.name]), node.name)
    builtin = [c for c in theirs.__mro__ if c.__module__ == "builtins"]
    assert all(issubclass(ours, c) for c in builtin), f"{node.name}: Inspect's is a {builtin}"
    assert [c.__name__ for c in ours.__mro__ if c.__module__ != "builtins" and c not in ROOTS][1:2] == \
        [c.__name__ for c in theirs.__mro__ if c.__module__ != "builtins"][1:2], "its Inspect parent differs"


def test_every_inspect_name_is_marked() -> None:
    assert {node.name for node in DRAWN if node.inspect} == set(INSPECT)
