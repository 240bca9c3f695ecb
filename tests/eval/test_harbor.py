"""``harbor:DIR`` end to end with real Docker: ``examples/harbor --oracle`` scores what it scores under Harbor
(1.0 on each task) embedded and on two real workers through Redis; a broken solution is reported by name;
the default solver is a react agent with bash, python and text_editor; the verifier ignores a reward the agent
planted; the image cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.dataset import load_harbor
from orchestrator.eval import eval_async, eval_retry_async, oracle_failures, scripted_policy
from orchestrator.eval._harbor import ORACLE_MODEL
from orchestrator.eval._preflight import PreflightError
from orchestrator.model import ChatMessageTool, ModelOutput

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "harbor"
BROKEN = Path(__file__).resolve().parent / "harbor_fixtures" / "broken-solution"
TASKS = ["fix-word-count", "hello-world", "kv-store"]

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def _rewards(log: Any) -> dict[str, dict[str, float]]:
    assert all(s.error is None for s in log.samples), [s.error for s in log.samples]
    return {str(s.id): s.scores["harbor"].value for s in log.samples}


def _check_examples(log: Any) -> None:
    assert log.status == "success"
    # kv-store's service has a namespace of its own, as under compose: the agent's container reaches it by name.
    assert _rewards(log) == {"fix-word-count": {"reward": 1.0, "cases_passed": 1.0}, "hello-world": {"reward": 1.0},
                             "kv-store": {"reward": 1.0}}
    means = {s.name: s.metrics["mean"].value for s in log.results.scores}
    assert means == {"reward": pytest.approx(1.0), "cases_passed": pytest.approx(1 / 3)}  # missing names count 0
    for sample in log.samples:  # the verifier's files are in the log: its output, and the reward file it wrote
        files = {f["name"]: f for f in sample.scores["harbor"].metadata["verifier_files"]}
        assert "test-stdout.txt" in files and ({"reward.txt", "reward.json"} & set(files)), files
        assert all(f["whole"] for f in files.values())
    assert oracle_failures(log) == []
    by_id = {str(s.id): s for s in log.samples}
    for sid, sample in by_id.items():  # each task ran on its own content-addressed image
        [opened] = [e.data for e in sample.events if e.event == "info" and e.source == "sandbox"]
        assert opened["image"].startswith(f"toolfleet/harbor-{sid}:"), opened
    [pod] = [e.data for e in by_id["kv-store"].events if e.event == "info" and e.source == "sandbox"]
    assert list(pod["services"]) == ["kv"] and pod["services"]["kv"].startswith("toolfleet/harbor-kv-store-kv:")
    leftover = docker.from_env().containers.list(all=True, filters={"label": f"toolfleet.eval_id={log.eval.eval_id}"})
    assert leftover == [], [c.name for c in leftover]


async def test_examples_oracle_embedded(tmp_path: Path, sandbox_image: str) -> None:
    [log] = await eval_async("harbor:examples/harbor", ORACLE_MODEL, log_dir=tmp_path, task_args={"oracle": True})
    _check_examples(log)
    assert log.eval.task_args == {"oracle": True} and log.eval.task == "harbor"
    assert log.eval.task_file == f"harbor:{EXAMPLES}"
    # The log names the task as harbor:DIR with its args: eval-retry re-loads it (nothing left to run here).
    again = await eval_retry_async(log.location)
    assert again.status == "success" and again.eval.eval_id == log.eval.eval_id


@pytest.mark.celery
async def test_examples_oracle_on_two_workers(tmp_path: Path, sandbox_image: str, fleet) -> None:  # type: ignore[no-untyped-def]
    # (orphan_grace as shipped: on this shared, loaded machine a 2 s grace closes sandboxes of a busy orchestrator)
    # Harbor's own set-up (/logs) and verifiers run as root: a worker allows that only with --allow-root-user;
    # Harbor's default network is public: a worker gives sandboxes a way out only with --allow-network public.
    workers = [fleet.worker(slots=2, orphan_grace=30.0, extra_args=("--allow-root-user", "--allow-network", "public"))
               for _ in range(2)]
    # One task's image is new (a file only this run has in its build context): it is built at load, after the
    # workers last listed their images, and the eval still starts (preflight waits for their next listing).
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES, tasks)
    (tasks / "hello-world" / "environment" / "nonce.txt").write_text(uuid.uuid4().hex)
    try:
        [log] = await eval_async(f"harbor:{tasks}", ORACLE_MODEL, log_dir=tmp_path / "logs",
                                 task_args={"oracle": True}, broker=fleet.redis.url)
        _check_examples(log)
        hosts = {e.data["host"] for s in log.samples for e in s.events if e.event == "info" and e.source == "sandbox"}
        assert hosts and hosts <= {w.host for w in workers}
    finally:
        fresh = load_harbor(tasks, build=False).samples
        image = next(s.sandbox["image"] for s in fresh if s.id == "hello-world")  # type: ignore[index]
        docker.from_env().images.remove(image, noprune=False)  # this test's own image


@pytest.mark.celery
async def test_fleet_without_root_is_refused_at_preflight(tmp_path: Path, sandbox_image: str, fleet) -> None:  # type: ignore[no-untyped-def]
    # Harbor's set-up, the sweep of the agent's processes and the verifier's directories run as root: a fleet
    # that does not allow it would fail every sample with a bare PermissionError. One line instead, naming the flag.
    fleet.worker(slots=2)
    args: dict[str, Any] = dict(log_dir=tmp_path / "logs", task_args={"oracle": True}, broker=fleet.redis.url,
                                sample_id="hello-world")
    with pytest.raises(PreflightError) as caught:
        await eval_async("harbor:examples/harbor", ORACLE_MODEL, **args)
    assert str(caught.value) == ("The task runs commands as root in its sandboxes (sample hello-world), which no "
                                 "live worker allows: start the workers with --allow-root-user.")
    root = fleet.worker(slots=2, extra_args=("--allow-root-user",))  # a mixed fleet: a sample may land anywhere
    with pytest.raises(PreflightError, match=r"which 1 of the 2 live workers \(w-\w+\) do not allow, and a sample "
                                             "may be placed on any: start every worker with --allow-root-user"):
        await eval_async("harbor:examples/harbor", ORACLE_MODEL, **args)
    assert root.alive()


def test_cli_reports_a_broken_solution(tmp_path: Path, sandbox_image: str) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-world", tasks / "hello-world")
    shutil.copytree(BROKEN, tasks / "broken-solution")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{tasks}", "--oracle",
                           "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 1, done.stderr  # an oracle that fails fails the command
    lines = done.stdout.splitlines()
    assert "reward: mean=0.500, stderr=0.500" in lines, lines
    assert "oracle failed on 1 of 2 tasks: broken-solution (reward 0)" in lines, lines
    assert "harbor: 2 tasks from" in done.stderr and "cached" in done.stderr


@scripted_policy("harbor_hello")
def _hello(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """Says hello with bash, then submits (and records which tools it was offered)."""
    _hello.offered = sorted(t.name for t in tools)  # type: ignore[attr-defined]
    if not any(isinstance(m, ChatMessageTool) for m in messages):
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": "echo 'Hello, world!' > ~/hello.txt"})
    return ModelOutput.for_tool_call("scripted", "submit", {"answer": "done"})


async def test_default_solver_is_react_with_bash_python_text_editor(tmp_path: Path, sandbox_image: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    [log] = await eval_async("harbor:examples/harbor", "scripted/harbor_hello", log_dir=tmp_path,
                             sample_id="hello-world")
    assert _rewards(log) == {"hello-world": {"reward": 1.0}}
    assert _hello.offered == ["bash", "python", "submit", "text_editor"]  # type: ignore[attr-defined]
    # Only the selected sample's image is built (or found): one, not four.
    assert "toolfleet: harbor: 1 of 3 tasks from examples/harbor; images: 0 built, 1 cached" in capsys.readouterr().err


def test_planted_reward_is_not_taken_and_cache_hits(tmp_path: Path, sandbox_image: str) -> None:
    task = tmp_path / "planted"
    shutil.copytree(BROKEN, task)
    # The "agent" writes a perfect reward itself; the verifier writes none: no reward file, reward 0.
    (task / "solution" / "solve.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (task / "tests" / "test.sh").write_text("echo checking; exit 3\n")
    first = load_harbor(task)
    again = load_harbor(task)
    assert len(first.report.built) + len(first.report.cached) == 1
    assert again.report.built == [] and again.report.cached == [first.samples[0].sandbox["image"]]  # type: ignore[index]
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{task}", "--oracle",
                           "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 1
    assert ("oracle failed on 1 of 1 task: planted (reward 0; no reward file (/logs/verifier/reward.txt or "
            "reward.json))") in done.stdout.splitlines(), done.stdout


@scripted_policy("harbor_sleepy")
def _sleepy(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """Sleeps in bash in 'slow-agent' (past its 3 s agent timeout); elsewhere submits at once."""
    from orchestrator.solver import sample_state

    state = sample_state()
    if state is not None and state.sample_id == "slow-agent" and not any(
        isinstance(m, ChatMessageTool) for m in messages):
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": "sleep 60"})
    return ModelOutput.for_tool_call("scripted", "submit", {"answer": "done"})


async def test_agent_and_verifier_timeouts_from_task_toml(tmp_path: Path, sandbox_image: str) -> None:
    for name, agent, verifier, test in (("slow-agent", 3, 60, "echo 1 > /logs/verifier/reward.txt"),
                                        ("slow-verifier", 60, 2, "echo 1 > /logs/verifier/reward.txt; sleep 30")):
        task = tmp_path / "tasks" / name
        shutil.copytree(BROKEN, task)
        (task / "task.toml").write_text(f"[agent]\ntimeout_sec = {agent}\n[verifier]\ntimeout_sec = {verifier}\n"
                                        "[environment]\nmemory_mb = 256\n")
        (task / "tests" / "test.sh").write_text(test + "\n")
    [log] = await eval_async(f"harbor:{tmp_path / 'tasks'}", "scripted/harbor_sleepy", log_dir=tmp_path / "logs")
    by_id = {str(s.id): s for s in log.samples}
    slow_agent, slow_verifier = by_id["slow-agent"], by_id["slow-verifier"]
    # The agent's time limit ends the sample as a limit; the verifier still runs and scores it.
    assert slow_agent.error is None and slow_agent.limit is not None and slow_agent.limit.type == "time"
    assert slow_agent.limit.limit == 3 and slow_agent.scores["harbor"].value == {"reward": 1.0}
    # A verifier past its timeout is killed and, as under Harbor, gives no reward (not even one it wrote before
    # the timeout): reward 0, and the explanation says so.
    score = slow_verifier.scores["harbor"]
    assert slow_verifier.error is None and score.value == {"reward": 0.0}
    assert score.explanation == "test.sh timed out after 2 s; no reward is taken from a verifier that timed out."
    assert score.metadata is not None
    assert {k: v for k, v in score.metadata.items() if k != "verifier_files"} == {
        "returncode": 124, "timed_out": True, "verifier_error": "no reward is taken from a verifier that timed out"}
    assert {f["name"] for f in score.metadata["verifier_files"]} == {"test-stdout.txt", "reward.txt"}


def test_examples_map_to_samples(sandbox_image: str) -> None:
    loaded = load_harbor(EXAMPLES, build=False)
    by_id = {str(s.id): s for s in loaded.samples}
    assert sorted(by_id) == TASKS and loaded.notes == {}
    hello = by_id["hello-world"]
    assert hello.input.startswith("Create a file `hello.txt`")
    assert hello.sandbox == {"type": "docker", "image": hello.sandbox["image"], "pool_size": 0,  # type: ignore[index]
                             "cpus": 1.0, "mem_limit": "512m", "network_mode": "public"}  # Harbor's default
    assert hello.metadata is not None and hello.metadata["difficulty"] == "easy"
    assert {k: v for k, v in hello.metadata["harbor"].items() if k != "dir"} == {
        "agent_timeout": 300.0, "verifier_timeout": 60.0, "verifier_user": None, "verifier_env": {},
        "solution_env": {}, "task_env": [], "has_solution": True,
        "network": {phase: {"network_mode": "public"} for phase in ("setup", "agent", "verifier")}}
    pod = by_id["kv-store"].sandbox
    assert isinstance(pod, dict) and pod["default_service"] == "main" and pod["mem_limit"] == "512m"
    assert pod["image"].startswith("toolfleet/harbor-kv-store:") and list(pod["services"]) == ["kv"]
    assert pod["services"]["kv"]["image"].startswith("toolfleet/harbor-kv-store-kv:")
    assert pod["services"]["kv"]["healthcheck"]["interval"] == 0.25
    assert len(loaded.builds) == 4 and loaded.report.built == []  # build=False: named, not built


def test_unmapped_settings_are_one_line_each(tmp_path: Path, sandbox_image: str) -> None:
    for name in ("gpu-a", "gpu-b"):
        task = tmp_path / name
        shutil.copytree(BROKEN, task)
        (task / "task.toml").write_text("[environment]\ngpus = 1\ntpu = { type = 'v6e', topology = '2x2' }\n"
                                        "allow_internet = false\nmemory_mb = 256\n")
    loaded = load_harbor(tmp_path, build=False)
    lines = loaded.lines("DIR")
    assert lines[:2] == [
        "harbor: not mapped, ignored: environment.gpus=1 (sandboxes get no GPUs) (tasks gpu-a, gpu-b)",
        "harbor: not mapped, ignored: environment.tpu (sandboxes get no TPUs) (tasks gpu-a, gpu-b)"]
    assert lines[2].startswith("harbor: 2 tasks from DIR; images: 0 built, 0 cached") and len(lines) == 3
    # allow_internet maps (Harbor's legacy spelling of network_mode): false is a sandbox without network.
    assert {s.sandbox["network_mode"] for s in loaded.samples} == {"none"}  # type: ignore[index]


def test_failing_build_is_one_line(tmp_path: Path, sandbox_image: str) -> None:
    task = tmp_path / "bad-build"
    shutil.copytree(BROKEN, task)
    (task / "environment" / "Dockerfile").write_text("FROM toolfleet/sandbox:latest\nRUN echo nope && exit 3\n")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{task}", "--oracle",
                           "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("toolfleet: error: Harbor task 'bad-build': building toolfleet/harbor-bad-build:"), line
    assert "returned a non-zero code: 3" in line, line


def test_verifier_user_env_and_solution_env(tmp_path: Path, sandbox_image: str) -> None:
    task = tmp_path / "as-root"
    shutil.copytree(BROKEN, task)
    (task / "task.toml").write_text('[verifier]\nuser = "root"\nenv = { GREETING = "${HARBOR_TEST_UNSET:-hi}" }\n'
                                    '[solution]\nenv = { ANSWER = "42" }\n[environment]\nmemory_mb = 256\n')
    (task / "solution" / "solve.sh").write_text('echo "$ANSWER $(id -un)" > /home/sandbox/answer.txt\n')
    (task / "tests" / "test.sh").write_text(
        'ok=0; [ "$(id -un)" = root ] && [ "$GREETING" = hi ] && [ "$TEST_DIR" = /tests ] && '
        '[ "$(cat /home/sandbox/answer.txt)" = "42 sandbox" ] && ok=1\n'
        'echo "$ok" > /logs/verifier/reward.txt; stat -c %a /logs/verifier\n')
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{task}", "--oracle",
                           "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "oracle passed on 1 task" in done.stdout.splitlines()
