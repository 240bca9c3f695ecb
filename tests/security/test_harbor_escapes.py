"""Terminal escapes from a Harbor task directory or its verifier never reach the operator's terminal raw.

Before: a task directory's name, an unknown ``task.toml`` key (both the dataset's) and a reward name from
``reward.json`` (written by code in the sandbox) were printed as they were: an OSC sequence retitled the
window, CSI cleared the screen. Now every such name is shown with its controls made visible (``\\x1b``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "eval" / "harbor_fixtures" / "broken-solution"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

NAME = "evil\x1b]0;pwned\x07task"
KEY = "\x1b[2J"
REWARD = "\x1b[31mred"


def test_task_names_keys_and_reward_names_are_escaped(tmp_path: Path, sandbox_image: str) -> None:
    task = tmp_path / "tasks" / NAME
    shutil.copytree(FIXTURE, task)
    (task / "task.toml").write_text('"\\u001b[2J" = 1\n[environment]\nmemory_mb = 256\n')
    (task / "solution" / "solve.sh").write_text("echo 42 > /home/sandbox/answer.txt\n")
    (task / "tests" / "test.sh").write_text("cat > /logs/verifier/reward.json <<'EOF'\n"
                                            '{"reward": 1, "\\u001b[31mred": 0.5}\nEOF\n')
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{tmp_path / 'tasks'}", "--oracle",
                           "--display", "none", "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "\x1b" not in out and "\x07" not in out
    # Each name is there, visibly: the note with the unknown key and the task's name, the reward's metric.
    assert "harbor: not mapped, ignored: \\x1b[2J (unknown key, ignored as Harbor ignores it) (task " \
           "evil\\x1b]0;pwned\\x07task)" in done.stderr, done.stderr
    assert "\\x1b[31mred: mean=0.500" in done.stdout, done.stdout
    assert "reward: mean=1.000" in done.stdout
