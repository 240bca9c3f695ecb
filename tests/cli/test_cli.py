"""The CLI as users run it (real subprocesses): one-line errors for bad input, log commands, bench discovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval.task_files import BASIC
from tests.support.fleet import free_port

# slow: every test runs the CLI in a child process
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          timeout=90, env={**os.environ, **(env or {})}, cwd=cwd)


def _assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("toolfleet: error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def bad_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("approvers: [ {name: auto, tools: '*'\n")
    return path


TASK = f"{BASIC}@basic"


def test_missing_task_file(tmp_path: Path) -> None:
    _assert_one_line_error(run("eval", str(tmp_path / "nope.py"), "--model", "scripted/echo"), "nope.py",
                           "does not exist")


def test_task_file_without_that_task() -> None:
    _assert_one_line_error(run("eval", f"{BASIC}@missing", "--model", "scripted/echo"), "no task 'missing'")


def test_unknown_model_provider(tmp_path: Path) -> None:
    _assert_one_line_error(run("eval", TASK, "--model", "nosuch/model", "--log-dir", str(tmp_path)), "nosuch")


def test_unknown_scripted_policy(tmp_path: Path) -> None:
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/nosuch", "--log-dir", str(tmp_path)),
                           "Unknown scripted policy 'nosuch'", "echo")


def test_model_without_credentials(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", TASK, "--model", "openai/gpt-4o-mini",
                             "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=90, env=env)
    _assert_one_line_error(result, "openai/gpt-4o-mini", "API key")


def test_unreachable_broker(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "--broker", url, "--log-dir", str(tmp_path)),
                           "Cannot reach the broker", url)


@pytest.mark.parametrize(("secret", "needles"), [
    (None, ("No fleet secret: set TOOLFLEET_SECRET",)),
    ("s3cr", ("The fleet secret is too short", "at least 16 bytes")),
], ids=["missing", "short"])
def test_a_missing_or_short_fleet_secret_is_one_line(tmp_path: Path, own_redis, secret, needles) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLFLEET_SECRET", "TOOLFLEET_SECRET_FILE")}
    if secret is not None:
        env["TOOLFLEET_SECRET"] = secret
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", TASK, "--model", "scripted/echo",
                             "--broker", own_redis.url, "--log-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=90, env=env)
    _assert_one_line_error(result, *needles)
    assert result.returncode == 1
    assert "s3cr" not in result.stderr  # the secret itself is never echoed


def test_unreachable_docker(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"tcp://127.0.0.1:{free_port()}"}
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "--sandbox", "docker", "--log-dir",
                               str(tmp_path), env=env), "Cannot reach the Docker daemon")


def test_malformed_approval_yaml(tmp_path: Path, bad_yaml: Path) -> None:
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "--approval", str(bad_yaml), "--log-dir",
                               str(tmp_path)), "policy.yaml", "YAML")


def test_malformed_review_yaml(tmp_path: Path, bad_yaml: Path) -> None:
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "--review", str(bad_yaml), "--log-dir",
                               str(tmp_path)), "policy.yaml", "YAML")


def test_policy_naming_an_unknown_approver(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("approvers:\n  - name: nosuch\n    tools: '*'\n")
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "--approval", str(path), "--log-dir",
                               str(tmp_path)), "nosuch")


def test_bad_task_arg(tmp_path: Path) -> None:
    _assert_one_line_error(run("eval", TASK, "--model", "scripted/echo", "-T", "nope=1", "--log-dir", str(tmp_path)),
                           "nope")


def test_eval_retry_of_a_non_log(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"hello": 1}\n')
    _assert_one_line_error(run("eval-retry", str(path)), "not a toolfleet eval log")


def test_eval_then_log_commands(tmp_path: Path) -> None:
    done = run("eval", TASK, "--model", "scripted/echo", "-T", "n=3", "--log-dir", str(tmp_path), "--display", "log")
    assert done.returncode == 0, done.stderr
    assert "includes: accuracy=1.000" in done.stdout
    # Not a TTY: structured JSON lines on stderr, one per finished sample.
    events = [json.loads(line)["event"] for line in done.stderr.splitlines()]
    assert events[0] == "eval_start" and events[-1] == "eval_end" and events.count("sample_done") == 3
    [log_path] = tmp_path.glob("*.jsonl")

    listed = run("log", "list", "--log-dir", str(tmp_path), "--json")
    assert listed.returncode == 0
    row = json.loads(listed.stdout)
    assert (row["task"], row["status"], row["done"], row["total"]) == ("basic", "success", 3, 3)

    shown = run("log", "show", str(log_path))
    assert shown.returncode == 0 and "[s0#1] includes=C" in shown.stdout
    sample = run("view", str(log_path), "--sample", "s2")
    assert sample.returncode == 0 and "value-of-s2" in sample.stdout and "The answer is answer-2." in sample.stdout

    dumped = run("log", "dump", str(log_path))
    data = json.loads(dumped.stdout)
    assert data["format"] == "toolfleet-eval-log" and data["status"] == "success" and len(data["samples"]) == 3


def test_bench_lists_workloads_and_rejects_unknown() -> None:
    listed = run("bench")
    assert "humaneval" in listed.stdout
    _assert_one_line_error(run("bench", "nosuch"), "nosuch", "humaneval")


def test_worker_help_is_passed_through() -> None:
    result = run("worker", "--help")
    assert result.returncode == 0 and "--broker" in result.stdout
