"""Where a toolfleet source checkout is, for the commands that use what only the source holds.

The benchmark workloads (``tests/benchmarks/``: they start their own Redis and workers from the
checkout's test fleet) and the sandbox image recipes (``sandbox_images/build.sh``) ship with the
source, not in the wheel. ``toolfleet bench`` and ``toolfleet setup images`` look in the current
directory and its parents, then in the source tree this package runs from (an editable install), and
accept a directory only when its ``pyproject.toml`` names the ``toolfleet`` project: another
project's ``tests/benchmarks`` is never imported, nor its ``build.sh`` run.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PROJECT = "toolfleet"
BENCHMARKS = Path("tests") / "benchmarks"
BUILD_SCRIPT = Path("sandbox_images") / "build.sh"
WHERE = ("the benchmark workloads live in tests/benchmarks/ of a toolfleet source checkout "
         "(git clone the toolfleet repository and run `toolfleet bench` inside it)")


def is_checkout(path: Path, needs: Path = BENCHMARKS / "__init__.py") -> bool:
    """``path`` is a toolfleet source tree holding the file ``needs`` (default: the benchmark package)."""
    if not (path / needs).is_file():
        return False
    try:
        project = tomllib.loads((path / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == PROJECT


def find_checkout(cwd: Path, package_dir: Path, needs: Path = BENCHMARKS / "__init__.py") -> Path | None:
    """The checkout for ``cwd`` (it or a parent), else the one ``package_dir`` (``orchestrator/``) lies in."""
    for candidate in (cwd, *cwd.parents, package_dir.parent):
        if is_checkout(candidate, needs):
            return candidate
    return None


def importable(root: Path) -> None:
    """Make ``tests.benchmarks`` of ``root`` importable without shadowing the installed ``orchestrator``
    and ``workers`` (appended: what this process already runs stays first on the path)."""
    if str(root) not in sys.path:
        sys.path.append(str(root))
