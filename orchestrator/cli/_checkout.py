"""Where a toolfleet checkout's benchmark workloads are, for ``toolfleet bench``.

The workloads (``tests/benchmarks/``) start their own Redis and workers from the checkout's test
fleet, so they ship with the source, not in the wheel. ``toolfleet bench`` looks for them in the
current directory and its parents, then in the source tree this package runs from (an editable
install), and accepts a directory only when its ``pyproject.toml`` names the ``toolfleet`` project:
another project's ``tests/benchmarks`` is never imported.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PROJECT = "toolfleet"
BENCHMARKS = Path("tests") / "benchmarks"
WHERE = ("the benchmark workloads live in tests/benchmarks/ of a toolfleet source checkout "
         "(git clone the toolfleet repository and run `toolfleet bench` inside it)")


def is_checkout(path: Path) -> bool:
    """``path`` is a toolfleet source tree holding the benchmark package."""
    if not (path / BENCHMARKS / "__init__.py").is_file():
        return False
    try:
        project = tomllib.loads((path / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == PROJECT


def find_checkout(cwd: Path, package_dir: Path) -> Path | None:
    """The checkout for ``cwd`` (it or a parent), else the one ``package_dir`` (``orchestrator/``) lies in."""
    for candidate in (cwd, *cwd.parents, package_dir.parent):
        if is_checkout(candidate):
            return candidate
    return None


def importable(root: Path) -> None:
    """Make ``tests.benchmarks`` of ``root`` importable without shadowing the installed ``orchestrator``
    and ``workers`` (appended: what this process already runs stays first on the path)."""
    if str(root) not in sys.path:
        sys.path.append(str(root))
