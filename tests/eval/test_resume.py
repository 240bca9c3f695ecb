"""Resume after SIGKILL of the orchestrator: finished samples are not re-run, results end up complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.eval import read_eval_log

from .task_files import BASIC

pytestmark = pytest.mark.timeout(180)

N = 12


def _toolfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def _sample_lines(log_dir: Path) -> tuple[Path | None, int]:
    logs = list(log_dir.glob("*.jsonl"))
    if not logs:
        return None, 0
    text = logs[0].read_bytes().split(b"\n")
    return logs[0], sum(1 for line in text if line.startswith(b'{"type": "sample"'))


def _open_sandbox_lines(path: Path) -> int:
    opened = closed = 0
    for line in path.read_bytes().split(b"\n"):
        if line.startswith(b'{"type": "sandbox", "event": "open"'):
            opened += 1
        elif line.startswith(b'{"type": "sandbox", "event": "close"'):
            closed += 1
    return opened - closed


def _kill_after_samples(cmd: list[str], log_dir: Path, env: dict[str, str], at_least: int,
                        open_sandboxes: int = 0, also: Callable[[Path], bool] | None = None) -> Path:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready() -> bool:
        path, n = _sample_lines(log_dir)
        return n >= at_least and (not open_sandboxes
                                  or (path is not None and _open_sandbox_lines(path) >= open_sandboxes)) \
            and (also is None or (path is not None and also(path)))

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ready():
                # Checked again with the eval stopped: what held when it was seen may have changed during the
                # check (a sample closing its container on a loaded machine), and the kill must find it so.
                proc.send_signal(signal.SIGSTOP)
                if ready():
                    break
                proc.send_signal(signal.SIGCONT)
            if proc.poll() is not None:
                raise AssertionError("the eval finished before it could be killed")
            time.sleep(0.05)
        else:
            raise AssertionError("the eval wrote no samples in time")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    path, _ = _sample_lines(log_dir)
    assert path is not None
    return path


@pytest.mark.slow  # runs the CLI in a child process and SIGKILLs it
@pytest.mark.parametrize("sandbox", [None, pytest.param("docker", marks=pytest.mark.docker)])
def test_resume_after_sigkill(tmp_path: Path, sandbox: str | None) -> None:
    marker = tmp_path / "runs.txt"
    log_dir = tmp_path / "logs"
    env = {**os.environ, "TOOLFLEET_TEST_MARKER": str(marker), "TOOLFLEET_TEST_DELAY": "0.15"}
    args = ["eval", f"{BASIC}@basic", "--model", "scripted/echo", "-T", f"n={N}", "--max-samples", "2",
            "--log-dir", str(log_dir), "--display", "log"]
    if sandbox:
        args += ["--sandbox", sandbox]
    # With docker, kill while a sample holds a container (between samples there may be none).
    holding = (lambda p: bool(_containers(read_eval_log(p).eval.eval_id))) if sandbox == "docker" else None
    path = _kill_after_samples(_toolfleet(*args), log_dir, env, at_least=3, also=holding)

    before = read_eval_log(path)
    assert before.status == "started"  # no footer: the run died
    if sandbox == "docker":
        # The killed run left its running samples' containers behind (the resume must clean them up).
        assert _containers(before.eval.eval_id), "expected the killed run to leave containers"
    finished_before = {str(s.id) for s in before.samples}
    assert 3 <= len(finished_before) < N

    done = subprocess.run(_toolfleet("eval-retry", str(path), "--display", "none"), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    after = read_eval_log(path)
    assert after.status == "success"
    assert sorted(str(s.id) for s in after.samples) == sorted(f"s{i}" for i in range(N))
    assert all(s.scores["includes"].value == "C" for s in after.samples)
    assert after.results is not None and after.results.completed_samples == N
    runs = Counter(marker.read_text().split())
    for sample_id in finished_before:
        assert runs[sample_id] == 1, f"finished sample {sample_id} was run again"
    assert [r.resumed for r in after.runs] == [False, True]
    assert before.eval.eval_id == after.eval.eval_id

    if sandbox == "docker":
        leaked = _containers(after.eval.eval_id)
        assert leaked == [], f"containers of the killed run leaked: {leaked}"


def _containers(eval_id: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=toolfleet.eval_id={eval_id}"],
                          capture_output=True, text=True, timeout=30).stdout.split()


@pytest.mark.slow  # runs the CLI in a child process and SIGKILLs it
def test_rerun_with_same_log_dir_resumes(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    log_dir = tmp_path / "logs"
    env = {**os.environ, "TOOLFLEET_TEST_MARKER": str(marker), "TOOLFLEET_TEST_DELAY": "0.15"}
    cmd = _toolfleet("eval", f"{BASIC}@basic", "--model", "scripted/echo", "-T", f"n={N}", "--max-samples", "2",
                     "--log-dir", str(log_dir), "--display", "none")
    path = _kill_after_samples(cmd, log_dir, env, at_least=2)
    finished_before = {str(s.id) for s in read_eval_log(path).samples}

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(log_dir.glob("*.jsonl")) == [path]  # the same log, continued
    after = read_eval_log(path)
    assert after.status == "success" and len(after.samples) == N
    runs = Counter(marker.read_text().split())
    assert all(runs[s] == 1 for s in finished_before)
    # The summary line on stdout names the log.
    assert str(path.name) in done.stdout
    assert json.loads(path.read_text().splitlines()[-1])["type"] == "footer"
