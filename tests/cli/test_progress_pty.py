"""The live progress display, rendered by rich in a real pseudo-terminal."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

from tests.eval.task_files import BASIC

# slow: every test runs the CLI in a child process on a pty
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_progress_display_on_a_tty(tmp_path: Path) -> None:
    env = {**os.environ, "TOOLFLEET_TEST_DELAY": "0.2", "TERM": "xterm-256color"}
    child = pexpect.spawn(sys.executable, ["-m", "orchestrator.cli", "eval", f"{BASIC}@basic", "--model",
                                           "scripted/echo",
                                           "-T", "n=8", "--max-samples", "2", "--log-dir", str(tmp_path)],
                          env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    screen = ANSI.sub("", child.before or "")
    assert "Traceback" not in screen
    # Mid-run frames: some samples done, two running (max-samples 2), tool-call rate, tokens, an ETA.
    assert re.search(r"progress\s+\S+\s+[1-7]/8 samples", screen), screen
    assert re.search(r"running\s+2\b", screen)
    assert re.search(r"errors\s+0\s+\(sample retries 0, model API retries 0", screen)
    assert re.search(r"tool calls\s+[1-9]\d*\s+\(\d+\.\d/s\)", screen)
    assert re.search(r"tokens\s+[1-9][\d,]*", screen)
    assert re.search(r"ETA \d\d:\d\d", screen)
    # Final frame and summary.
    assert re.search(r"8/8 samples", screen)
    assert "includes: accuracy=1.000" in screen


def test_ctrl_c_stops_cleanly_and_the_eval_resumes(tmp_path: Path) -> None:
    from orchestrator.eval import eval_retry, read_eval_log

    env = {**os.environ, "TOOLFLEET_TEST_DELAY": "0.3", "TERM": "xterm-256color"}
    child = pexpect.spawn(sys.executable, ["-m", "orchestrator.cli", "eval", f"{BASIC}@basic", "--model",
                                           "scripted/echo",
                                           "-T", "n=30", "--max-samples", "2", "--log-dir", str(tmp_path)],
                          env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    try:
        child.expect(r"[3-9]/30 samples")
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 130
    screen = ANSI.sub("", child.before or "")
    assert "Traceback" not in screen
    assert "interrupted" in screen and "eval-retry" in screen
    [path] = tmp_path.glob("*.jsonl")
    interrupted = read_eval_log(path)
    assert interrupted.status == "cancelled"
    assert 3 <= len(interrupted.samples) < 30

    resumed = eval_retry(path, display="none")
    assert resumed.status == "success" and len(resumed.samples) == 30
