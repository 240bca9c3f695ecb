"""Sandbox driver tests: fixtures come from ``fixtures.py`` (shared with ``tests/tools``)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.sandbox.fixtures import env, sandbox_factory, sandbox_image  # noqa: E402,F401 - after sys.path; fixtures pytest finds by name
