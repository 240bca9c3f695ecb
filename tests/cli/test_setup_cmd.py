"""`toolfleet setup`: idempotent on a provisioned machine, one clear line for a mistake."""

from __future__ import annotations

import subprocess
import sys

import pytest

# slow: every test runs the CLI in a child process
pytestmark = pytest.mark.slow


def _setup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "setup", *args], capture_output=True,
                          text=True, timeout=300)


def test_unknown_component_is_one_line() -> None:
    done = _setup("redis", "postgres")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        ("toolfleet: error: unknown setup component 'postgres' "
        "(choose from: redis, registry, images, browser, faketime)")]


def test_everything_present_is_a_quick_no_op() -> None:
    """The suite runs after `toolfleet setup`, so here every component is already there and nothing is rebuilt."""
    done = _setup()
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "toolfleet setup: redis-server: present",
        "toolfleet setup: docker-registry: present",
        "toolfleet setup: sandbox images: present (toolfleet/debian-base:bookworm, toolfleet/sandbox:latest)",
        "toolfleet setup: chromium: present",
        "toolfleet setup: faketime: present",
    ]
