"""Drive ``tests/review/console_driver.py`` on a real pseudo-terminal (pexpect), as an operator would."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parents[2]
DRIVER = str(ROOT / "tests" / "review" / "console_driver.py")


def spawn(*args: str) -> pexpect.spawn:
    """Start the driver (``review ...`` or ``approve ...``) on its own terminal."""
    return pexpect.spawn(sys.executable, [DRIVER, *args], cwd=str(ROOT), encoding="utf-8", timeout=20,
                         dimensions=(50, 200))


def finish(child: pexpect.spawn) -> str:
    """Wait for the driver to end cleanly; returns what it printed after the last prompt."""
    child.expect("DRIVER DONE")
    out = str(child.before)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, out
    return out
