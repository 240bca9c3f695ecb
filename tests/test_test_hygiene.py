"""Guards on the test suite's own habits, read from the source of every file under ``tests/``.

* A ``time.sleep``/``asyncio.sleep`` statement directly followed by an ``assert`` gates the assertion
  on a guess about timing: on a loaded machine the state is not there yet (a flaky failure), or
  the assertion passes without the state ever being reached. Wait on the state with a bound instead
  (a poll loop, a log line counted from before the action, a claim key). ``asyncio.sleep(0)`` is not
  a wait but one turn of the event loop (what callbacks scheduled so far do, whatever the load), so
  a test may assert right after it.
* ``pytest.importorskip`` of something ``pip install -e .[dev]`` installs hides a broken install as
  a skip: the suite's prerequisites are imported plainly (README: nothing is skipped for lack of one).

Both checks are pure functions over source text, tested by tables on small snippets, then run on
the real tree.
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from itertools import pairwise
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

SLEEP_MODULES = frozenset({"time", "asyncio"})


@dataclass(frozen=True)
class Finding:
    line: int
    what: str


# --- the checks (pure) --------------------------------------------------------------------------

def _sleep_names(tree: ast.AST) -> frozenset[str]:
    """Bare names bound to a sleep by ``from time import sleep`` / ``from asyncio import sleep as nap``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in SLEEP_MODULES:
            names.update(alias.asname or alias.name for alias in node.names if alias.name == "sleep")
    return frozenset(names)


def _is_sleep(stmt: ast.stmt, bare: frozenset[str]) -> bool:
    if not isinstance(stmt, ast.Expr):
        return False
    value = stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if value.args and isinstance(value.args[0], ast.Constant) and value.args[0].value == 0:
        return False  # one turn of the event loop: ordering, not timing
    if isinstance(func, ast.Attribute):
        return func.attr == "sleep" and isinstance(func.value, ast.Name) and func.value.id in SLEEP_MODULES
    return isinstance(func, ast.Name) and func.id in bare


def _blocks(tree: ast.AST):  # type: ignore[no-untyped-def]
    """Every statement list in the tree (bodies, else/finally branches, handlers, match cases)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _ending(stmt: ast.stmt) -> ast.stmt:
    """What runs last in ``stmt``: a ``with`` block always runs through its body to the next statement, so
    a sleep ending it gates that statement as surely as one beside it (loops and branches may not)."""
    while isinstance(stmt, (ast.With, ast.AsyncWith)) and not any(_expects_raise(i) for i in stmt.items):
        stmt = stmt.body[-1]
    return stmt


def _expects_raise(item: ast.withitem) -> bool:
    """``with pytest.raises(...)``: its body is meant not to run through (a sleep there is what gets cut)."""
    call = item.context_expr
    func = call.func if isinstance(call, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr == "raises") or (isinstance(func, ast.Name)
                                                                          and func.id == "raises")


def sleeps_before_asserts(source: str) -> list[Finding]:
    """A sleep statement whose next statement in the same block is an ``assert``, or that ends a ``with``
    block followed by one."""
    tree = ast.parse(source)
    bare = _sleep_names(tree)
    found = []
    for block in _blocks(tree):
        for before, following in pairwise(block):
            stmt = _ending(before)
            if _is_sleep(stmt, bare) and isinstance(following, ast.Assert):
                found.append(Finding(stmt.lineno, f"a sleep gates the assert on line {following.lineno}"))
    return sorted(found, key=lambda f: f.line)


def installed_skips(source: str, installed: frozenset[str]) -> list[Finding]:
    """``importorskip`` of a module whose top-level package is in ``installed`` (import names)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name != "importorskip" or not node.args:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] in installed:
            found.append(Finding(node.lineno, f"importorskip({arg.value!r}): the dev install provides it"))
    return found


def _normalise(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def import_names(distributions: list[str], index: dict[str, list[str]]) -> frozenset[str]:
    """Top-level import names of these distributions (``index``: import name -> distributions, as
    ``importlib.metadata.packages_distributions()`` gives it); a distribution that is not installed
    is assumed to import under its own name (``inspect-ai`` -> ``inspect_ai``)."""
    wanted = {_normalise(d) for d in distributions}
    names = {name for name, dists in index.items() if any(_normalise(d) in wanted for d in dists)}
    names.update(_normalise(d).replace("-", "_") for d in distributions)
    return frozenset(names)


def dev_install_distributions(pyproject: str) -> list[str]:
    """What ``pip install -e .[dev]`` installs directly: the dependencies and the dev extra."""
    project = tomllib.loads(pyproject)["project"]
    specs = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("dev", [])]
    return [Requirement(spec).name for spec in specs]


# --- tables -------------------------------------------------------------------------------------

SLEEP_CASES = {
    "sleep then assert": ("import time\ntime.sleep(0.5)\nassert done()\n", [2]),
    "awaited sleep then assert": ("import asyncio\nasync def t():\n    await asyncio.sleep(0.3)\n    assert x\n", [3]),
    "bare sleep imported from time": ("from time import sleep\nsleep(1)\nassert x\n", [2]),
    "aliased sleep": ("from asyncio import sleep as nap\nasync def t():\n    await nap(1)\n    assert x\n", [3]),
    "inside try, with and if": (("import time\ntry:\n    with open('f'):\n        if a:\n            time.sleep(1)\n"
                                 "            assert b\nfinally:\n    pass\n"), [5]),
    "ending a with block": (("import asyncio\nasync def t():\n    async with x:\n        await asyncio.sleep(0.3)\n"
                             "    assert y\n"), [4]),
    "ending nested with blocks": ("import time\nwith a:\n    with b:\n        time.sleep(1)\nassert y\n", [4]),
    "ending a pytest.raises block": (("import asyncio, pytest\nasync def t():\n    with pytest.raises(E), limit(0.1):\n"
                                      "        await asyncio.sleep(10)\n    assert y\n"), []),
    "ending a loop is a poll": ("import time\nfor _ in range(3):\n    time.sleep(1)\nassert y\n", []),
    "in an else branch": ("import time\nif a:\n    pass\nelse:\n    time.sleep(1)\n    assert b\n", [5]),
    "poll loop": (("import asyncio\nasync def t():\n    for _ in range(100):\n        if ready():\n            break\n"
                   "        await asyncio.sleep(0.05)\n    assert ready()\n"), []),
    "sleep then an action": ("import time\ntime.sleep(0.01)\nsend()\nassert x\n", []),
    "one loop turn then assert": ("import asyncio\nasync def t():\n    await asyncio.sleep(0)\n    assert x\n", []),
    "a short sleep is still a sleep": ("import asyncio\nasync def t():\n    await asyncio.sleep(0.001)\n    assert x\n",
                                       [3]),
    "a sleep that is not time's": (
        "class Clock:\n    def sleep(self): pass\nclock = Clock()\nclock.sleep()\nassert x\n", []),
    "a sleep in a sandbox command": ("async def t(env):\n    await env.exec(['sleep', '1'])\n    assert x\n", []),
}


@pytest.mark.parametrize(("source", "lines"), SLEEP_CASES.values(), ids=SLEEP_CASES.keys())
def test_a_sleep_directly_before_an_assert_is_found(source: str, lines: list[int]) -> None:
    assert [f.line for f in sleeps_before_asserts(textwrap.dedent(source))] == lines


INSTALLED = frozenset({"inspect_ai", "pexpect", "yaml"})
SKIP_CASES = {
    "installed module": ("import pytest\nlog = pytest.importorskip('inspect_ai.log')\n", [2]),
    "installed, bare name": ("from pytest import importorskip\nimportorskip('pexpect')\n", [2]),
    "installed under another import name": ("import pytest\npytest.importorskip('yaml')\n", [2]),
    "not installed by the dev extra": ("import pytest\npytest.importorskip('gvisor_tools')\n", []),
    "a plain import": ("import inspect_ai.log\n", []),
}


@pytest.mark.parametrize(("source", "lines"), SKIP_CASES.values(), ids=SKIP_CASES.keys())
def test_an_importorskip_of_an_installed_dependency_is_found(source: str, lines: list[int]) -> None:
    assert [f.line for f in installed_skips(source, INSTALLED)] == lines


def test_distribution_names_map_to_import_names() -> None:
    index = {"yaml": ["PyYAML"], "pytest_asyncio": ["pytest-asyncio"], "_pytest": ["pytest"], "pytest": ["pytest"],
             "other": ["something-else"]}
    assert import_names(["PyYAML", "pytest-asyncio", "pytest", "inspect-ai"], index) == frozenset(
        {"yaml", "pyyaml", "pytest_asyncio", "_pytest", "pytest", "inspect_ai"})


def test_the_dev_install_is_read_from_pyproject() -> None:
    distributions = dev_install_distributions((REPO / "pyproject.toml").read_text())
    assert {"inspect-ai", "pexpect", "pytest-asyncio", "celery", "docker"} <= set(distributions)
    assert "inspect_ai" in import_names(distributions, packages_distributions())


# --- the real tree ------------------------------------------------------------------------------

def _test_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_sleep_gates_an_assertion_in_the_suite() -> None:
    found = [f"{path.relative_to(REPO)}:{f.line}: {f.what}" for path in _test_sources()
             for f in sleeps_before_asserts(path.read_text())]
    assert found == [], "wait on the state with a bound instead:\n" + "\n".join(found)


def test_no_test_skips_for_want_of_what_the_dev_install_provides() -> None:
    installed = import_names(dev_install_distributions((REPO / "pyproject.toml").read_text()), packages_distributions())
    found = [f"{path.relative_to(REPO)}:{f.line}: {f.what}" for path in _test_sources()
             for f in installed_skips(path.read_text(), installed)]
    assert found == [], "import it plainly:\n" + "\n".join(found)
