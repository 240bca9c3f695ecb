"""`local` sandboxes (message-chosen commands on the worker host, no isolation) are never for a broker on the
network by default: `--allow-local` alone is refused at start unless the broker is loopback-only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workers._admission import broker_is_loopback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(("url", "loopback"), [
    ("redis://127.0.0.1:6379/0", True),
    ("redis://:pw@127.0.0.2:6379/0", True),
    ("redis://localhost/0", True),
    ("redis://[::1]:6379/0", True),
    ("unix:///run/redis.sock", True),
    ("redis+socket:///run/redis.sock", True),
    ("redis://redis:6379/0", False),           # a name may resolve anywhere
    ("redis://broker.invalid:6379/0", False),
    ("rediss://:pw@10.1.2.3:6380/0", False),
    ("redis://0.0.0.0:6379/0", False),
])
def test_which_brokers_count_as_this_machine_only(url: str, loopback: bool) -> None:
    assert broker_is_loopback(url) is loopback


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLFLEET_SECRET": "x" * 32, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=REPO)


@pytest.mark.slow  # runs a worker in a child process
def test_allow_local_with_a_network_broker_is_refused_in_one_line() -> None:
    # `.invalid` never resolves: the worker refuses before it connects anywhere.
    done = _worker("--broker", "redis://broker.invalid:6379/0", "--allow-local")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("toolfleet worker: --allow-local runs message-chosen commands on this host")
    assert "--allow-local-remote" in line
