"""The Inspect-style eval flags from the command line (real subprocesses): each user mistake is one clear
line, the flags reach the log, the summary never invents a metric, Ctrl-C names the log, `log list` walks
subdirectories and never cuts a name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.eval.task_files import BASIC, FLAKY

from .test_cli import _assert_one_line_error, run

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow  # runs the CLI in a child process
@pytest.mark.parametrize(("flags", "needle"), [
    (["-T", "n=abc"], "-T n='abc': task 'basic' expects int"),
    (["-T", "nope=1"], "has no parameter 'nope'"),
    (["-M", "foo=1"], "Model provider 'scripted' has no argument 'foo'"),
    (["--epochs-reducer", "best"], "Unknown epochs reducer 'best'"),
    (["--fail-on-error", "1.5"], "--fail-on-error expects a count"),
    (["--sample-id", "zz"], "No sample with id 'zz'"),
    (["--max-connections", "0"], "--max-connections must be at least 1"),
    (["--max-subprocesses", "0"], "--max-subprocesses must be at least 1"),
    (["--max-tokens", "many"], "argument --max-tokens: invalid int value: 'many' (see `toolfleet eval --help`)"),
    (["--display", "fancy"], "argument --display: invalid choice: 'fancy'"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_mistakes_are_one_clear_line(tmp_path: Path, flags: list[str], needle: str) -> None:
    result = run("eval", f"{BASIC}@basic", "--model", "scripted/echo", "--log-dir", str(tmp_path), "--display", "none",
                 *flags)
    _assert_one_line_error(result, needle)
    assert not list(tmp_path.glob("*.jsonl"))  # nothing started


@pytest.mark.slow  # runs the CLI in a child process
def test_flags_reach_the_log(tmp_path: Path) -> None:
    result = run("eval", f"{FLAKY}@flaky", "--model", "scripted/answer", "--log-dir", str(tmp_path), "--display",
                 "none", "--sample-id", "s1,s3", "--epochs", "2", "--epochs-reducer", "pass_at_1",
                 "--temperature", "0.2", "--max-tokens", "64", "--seed", "7", "--top-p", "0.9",
                 "--max-connections", "3", "--fail-on-error", "0.5", "-M", "default_output=hi")
    assert result.returncode == 0, result.stderr
    dumped = json.loads(run("log", "dump", str(next(tmp_path.glob("*.jsonl")))).stdout)
    spec = dumped["eval"]
    assert spec["generate_config"] == {"temperature": 0.2, "max_tokens": 64, "seed": 7, "top_p": 0.9}
    assert spec["model_args"] == {"default_output": "hi"}
    assert spec["config"]["sample_ids"] == ["s1", "s3"] and spec["config"]["fail_on_error"] == 0.5
    assert spec["config"]["max_connections"] == 3 and spec["config"]["epochs_reducer"] == ["pass_at_1"]
    assert sorted((s["id"], s["epoch"]) for s in dumped["samples"]) == [("s1", 1), ("s1", 2), ("s3", 1), ("s3", 2)]
    [score] = dumped["results"]["scores"]
    assert score["reducer"] == "pass_at_1" and score["scored_samples"] == 2
    assert "includes: accuracy=1.000" in result.stdout and "(pass_at_1 over epochs)" in result.stdout


@pytest.mark.slow  # runs the CLI in a child process
def test_nothing_scored_prints_no_metric(tmp_path: Path) -> None:
    result = run("eval", f"{FLAKY}@flaky", "--model", "scripted/answer", "--log-dir", str(tmp_path), "--display",
                 "none", "--sample-id", "s1", env={"TOOLFLEET_TEST_BREAK": "1"})
    assert result.returncode == 1
    assert "includes: no samples scored" in result.stdout and "accuracy=" not in result.stdout
    [log] = list(tmp_path.glob("*.jsonl"))
    shown = run("log", "show", str(log)).stdout
    assert "includes: no samples scored" in shown and "accuracy=" not in shown


@pytest.mark.slow  # runs the CLI in a child process
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_end_the_eval_and_name_the_log(tmp_path: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "eval", f"{BASIC}@basic", "--model",
                             "scripted/echo", "-T", "n=40", "--max-samples", "1", "--log-dir", str(tmp_path),
                             "--display", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TOOLFLEET_TEST_DELAY": "0.2"})
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*.jsonl")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        [log] = list(tmp_path.glob("*.jsonl"))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert f"toolfleet eval-retry {log}" in err


@pytest.mark.slow  # runs the CLI in a child process
def test_log_list_walks_subdirectories_and_keeps_long_names(tmp_path: Path) -> None:
    nested = tmp_path / "set-a" / ("x" * 150)
    assert run("eval", f"{BASIC}@plain", "--model", "scripted/echo", "--log-dir", str(nested),
               "--display", "none").returncode == 0
    [log] = list(nested.glob("*.jsonl"))
    listing = run("log", "list", "--log-dir", str(tmp_path))
    assert listing.returncode == 0
    assert str(log.relative_to(tmp_path)) in listing.stdout
    as_json = [
        json.loads(line) for line in run("log", "list", "--log-dir", str(tmp_path), "--json").stdout.splitlines()]
    assert [row["log"] for row in as_json] == [str(log)]


@pytest.mark.parametrize(("flag", "parsed"), [
    ("local", "local"),
    ("docker", "docker"),
    ("docker:compose.yaml", ("docker", str(Path("compose.yaml").resolve()))),  # Inspect's form, from the cwd
    ("docker:/abs/c.yaml", ("docker", "/abs/c.yaml")),
])
def test_sandbox_flag(flag: str, parsed: object) -> None:
    from orchestrator.cli._eval_cmd import _sandbox_flag

    assert _sandbox_flag(flag) == parsed


@pytest.mark.parametrize("bad", ["podman:c.yaml", "docker:", "local:x"])
def test_sandbox_flag_refuses(bad: str) -> None:
    import argparse

    from orchestrator.cli._eval_cmd import _sandbox_flag

    with pytest.raises(argparse.ArgumentTypeError, match="use local, docker or docker:COMPOSE_FILE"):
        _sandbox_flag(bad)
