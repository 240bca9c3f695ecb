"""`toolfleet eval` takes its broker from $TOOLFLEET_BROKER, as the worker does (a URL with the Redis
password stays out of argv, where `ps` would show it): the compose stack relies on it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# slow: every test runs the CLI in a child process
pytestmark = pytest.mark.slow


def _eval(env_broker: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLFLEET_BROKER"}
    if env_broker is not None:
        env["TOOLFLEET_BROKER"] = env_broker
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", "examples/humaneval.py", "--model",
                           "scripted/oracle", "--limit", "1", "--no-preflight", *extra], capture_output=True,
                          text=True, timeout=120, env=env)


def test_broker_from_the_environment_with_its_password_redacted(tmp_path) -> None:
    done = _eval("redis://:s3cret-pw@127.0.0.1:1/0", "--log-dir", str(tmp_path))
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("toolfleet: error: Cannot reach the broker at redis://:***@127.0.0.1:1/0")
    assert "s3cret-pw" not in done.stderr


def test_the_flag_wins_over_the_environment(tmp_path) -> None:
    done = _eval("redis://127.0.0.1:1/0", "--broker", "redis://127.0.0.1:2/0", "--log-dir", str(tmp_path))
    assert done.returncode == 1 and "127.0.0.1:2" in done.stderr and "127.0.0.1:1/" not in done.stderr
