"""Getting a task's own tools into a worker's registry, at start and only at start.

``toolfleet worker`` takes, in this order:

- ``--install WHEEL`` (repeatable; a ``.whl`` file, or a directory: every wheel in it): installed with
  ``pip install --no-deps --no-index --target <private dir>``, never into the worker's environment and
  never from the network, into a directory of this worker process's own that is put first on
  ``sys.path`` (and removed when the worker exits). Its dependencies must already be in the worker's
  environment (``--no-deps``); build the wheel where the package's build tools are (``pip wheel
  --no-deps -w dist .``).
- ``--path DIR`` (repeatable): put on ``sys.path`` (a source tree, a task file's directory).
- ``--import MODULE`` (repeatable, plus ``$TOOLFLEET_IMPORT``, comma-separated, for images): imported, so
  the ``@tool``s it defines are registered. ``--import path/to/task.py`` imports a task file (the one
  ``toolfleet eval path/to/task.py`` runs) by its file name, with its directory on ``sys.path``.

A message never imports anything: the worker refuses a call to a tool its start-up registry lacks.
Each failure is one line (``ToolModuleError``): the worker says which flag failed and why, and exits.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator._errors import ToolfleetError

__all__ = ["IMPORT_ENV", "INSTALL_TIMEOUT_S", "ToolModuleError", "ToolModules", "imports_from_env"]

IMPORT_ENV = "TOOLFLEET_IMPORT"  # comma-separated modules a worker image imports (added to --import)
INSTALL_TIMEOUT_S = 300.0


class ToolModuleError(ToolfleetError, RuntimeError):
    """A start-up flag that loads tool code failed (one line)."""


def imports_from_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    return [m.strip() for m in environ.get(IMPORT_ENV, "").split(",") if m.strip()]


class ToolModules:
    """The tool code one worker process loads at start: installed wheels, path entries and imports.

    Owns the private directory wheels are installed into (``close`` removes it).
    """

    def __init__(self, imports: Sequence[str] = (), paths: Sequence[str] = (), installs: Sequence[str] = ()) -> None:
        self.imports = list(imports)
        self.paths = list(paths)
        self.installs = list(installs)
        self.install_dir: str | None = None

    def load(self) -> list[str]:
        """Install, extend the path, import; returns the modules imported (as imported)."""
        if self.installs:
            self._install()
        for entry in self.paths:
            path = Path(entry).expanduser().resolve()
            if not path.is_dir():
                raise ToolModuleError(f"--path {entry}: not a directory")
            _first_on_path(str(path))
        return [self._import(target) for target in self.imports]

    def _install(self) -> None:
        wheels: list[str] = []
        for entry in self.installs:
            path = Path(entry).expanduser().resolve()
            found = sorted(path.glob("*.whl")) if path.is_dir() else [path] if path.suffix == ".whl" else []
            if not path.exists() or not found:
                raise ToolModuleError(f"--install {entry}: not a wheel (.whl) or a directory holding wheels "
                                      "(build one with `pip wheel --no-deps -w dist .`)")
            wheels.extend(str(w) for w in found)
        self.install_dir = tempfile.mkdtemp(prefix="toolfleet-tools-")
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-input",
                   "--disable-pip-version-check", "--quiet", "--target", self.install_dir, *wheels]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ToolModuleError(f"--install: pip did not finish within {INSTALL_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            reason = next((line for line in lines if line.lower().startswith("error")), lines[-1] if lines else "")
            raise ToolModuleError(f"--install {' '.join(self.installs)}: pip failed: {reason or done.returncode}")
        _first_on_path(self.install_dir)

    def _import(self, target: str) -> str:
        module = target
        if target.endswith(".py"):  # a task file: its directory on the path, imported by its file name
            file = Path(target).expanduser().resolve()
            if not file.is_file():
                raise ToolModuleError(f"--import {target}: no such file")
            module = file.stem
            loaded = sys.modules.get(module)
            if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != file:
                raise ToolModuleError(f"--import {target}: a module named {module!r} is already imported from "
                                      f"elsewhere; rename the file or import it as a package module")
            _first_on_path(str(file.parent))
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - whatever the user's module raises, one line and exit
            reason = str(exc).splitlines()[0] if str(exc) else ""
            raise ToolModuleError(f"--import {target} failed: {type(exc).__name__}: {reason}".rstrip(": ")) from None
        return module

    def close(self) -> None:
        if self.install_dir is not None:
            shutil.rmtree(self.install_dir, ignore_errors=True)
            self.install_dir = None


def _first_on_path(entry: str) -> None:
    if entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
