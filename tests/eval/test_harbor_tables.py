"""Harbor tasks, the pure parts, by tables: task.toml mapping, reward files, image names and hashes, the
results' one-score-per-reward split, and malformed task directories refused in one line at load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import HarborTaskError, load_harbor
from orchestrator.dataset._harbor_config import MAX_TIMEOUT_S, TaskConfigError, map_task_config, parse_task_config
from orchestrator.dataset._harbor_images import base_images, context_hash, image_name
from orchestrator.eval import EvalSample, Task
from orchestrator.eval._results import eval_results
from orchestrator.scorer import Score, harbor_verifier
from orchestrator.scorer._harbor import RewardError, parse_rewards

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("toml", "expected"), [
    # Harbor's defaults: no agent timeout (bounded here by a sandbox's lifetime), 600 s verifier and build.
    ("", {"sandbox": {"cpus": 1.0, "mem_limit": "2048m"}, "agent_timeout": MAX_TIMEOUT_S, "verifier_timeout": 600.0,
          "build_timeout": 600.0, "verifier_user": None, "notes": []}),
    (('[environment]\ncpus = 2\nmemory_mb = 512\n[agent]\ntimeout_sec = 30\nuser = "agent"\n'
     '[verifier]\ntimeout_sec = 45\nuser = "root"\nenv = { K = "v" }'),
     {"sandbox": {"cpus": 2.0, "mem_limit": "512m", "user": "agent"}, "agent_timeout": 30.0,
      "verifier_timeout": 45.0, "verifier_user": "root", "verifier_env": {"K": "v"}, "notes": []}),
    ('[environment]\nmemory = "1G"\nenv = { A = "1" }\nworkdir = "/app"',
     {"sandbox": {"cpus": 1.0, "mem_limit": "1024m", "working_dir": "/app"}, "environment_env": {"A": "1"}}),
    ('[environment]\ngpus = 1\nstorage_mb = 4096', {"notes": [
        "environment.gpus=1 (sandboxes get no GPUs)",
        "environment.storage_mb (writable space is the sandbox's disk_limit, a worker setting)"]}),
    ('[verifier]\nenvironment_mode = "separate"\n[[verifier.collect]]\ncommand = "x"', {"notes": [
        "verifier.environment (the verifier runs in the agent's sandbox, Harbor's 'shared' mode)",
        "verifier.collect (not supported)"]}),
    ('surprise = 1\n[verifier]\ntimeot_sec = 5', {"notes": [
        "surprise (unknown key, ignored as Harbor ignores it)",
        "verifier.timeot_sec (unknown key, ignored as Harbor ignores it)"]}),
    ('[environment]\ndocker_image = "toolfleet/prebuilt:1"', {"docker_image": "toolfleet/prebuilt:1"}),
    ('[solution]\nenv = { S = "${HOME_X:-dflt}" }', {"solution_env": {"S": "${HOME_X:-dflt}"}}),
])
def test_task_toml_maps(toml: str, expected: dict[str, Any]) -> None:
    settings = map_task_config(parse_task_config(toml))
    for key, value in expected.items():
        assert getattr(settings, key) == value, key


@pytest.mark.parametrize(("toml", "error"), [
    ("[verifier\n", "not valid TOML"),
    ('[verifier]\ntimeout_sec = "soon"', "verifier.timeout_sec"),
    ("[agent]\ntimeout_sec = -1", "agent.timeout_sec: must be a finite number of seconds above 0"),
    ("[environment]\nbuild_timeout_sec = inf", "environment.build_timeout_sec: must be a finite number"),
    ("[environment]\nbuild_timeout_sec = nan", "environment.build_timeout_sec: must be a finite number"),
    ("[verifier]\ntimeout_sec = 1e308", ("verifier.timeout_sec: must be a finite number of seconds above 0 and at "
                                         "most 86400, got 1e")),
    ("[environment]\ncpus = inf", "environment.cpus"),
    ('[environment]\nnetwork_mode = "offline"', "environment.network_mode: 'offline' is not one of public"),
    ('[[steps]]\nname = "one"', "multi-step"),
])
def test_task_toml_refused(toml: str, error: str) -> None:
    with pytest.raises(TaskConfigError, match=error):
        map_task_config(parse_task_config(toml))


@pytest.mark.parametrize(("json_text", "txt", "expected"), [
    (None, "1\n", {"reward": 1.0}),
    (None, " 0.25 ", {"reward": 0.25}),
    ('{"reward": 1, "speed": 0.5, "ok": true}', None, {"reward": 1.0, "speed": 0.5, "ok": 1.0}),  # bools: numbers
    ('{"passed": 0.5}', "1", {"passed": 0.5}),  # the JSON wins, whole (Harbor never reads reward.txt beside it)
    ('{"reward": 0}', "1", {"reward": 0.0}),
    (None, "1e12", {"reward": 1e12}),
    (None, "-3", {"reward": -3.0}),
])
def test_rewards_parse(json_text: str | None, txt: str | None, expected: dict[str, float]) -> None:
    assert parse_rewards(json_text, txt) == expected


@pytest.mark.parametrize(("json_text", "txt", "error"), [
    (None, None, "no reward file"),
    (None, "", "reward.txt is empty"),
    (None, "yes", "not a number"),
    (None, "   ", "not a number"),
    (None, "nan", "not a finite number"),
    (None, "inf", "not a finite number"),
    (None, "1e308", "not a finite number of at most 1e\\+12"),
    ("", None, "reward.json is empty"),
    ("[1]", None, "JSON object"),
    ("{", None, "not JSON"),
    ("{}", None, "holds no reward"),
    ('{"a": "b"}', None, "reward 'a' is not a number"),
    ('{"reward": 1, "note": "x"}', None, "reward 'note' is not a number"),
    ('{"reward": NaN}', None, "not a finite number"),
    ('{"reward": Infinity}', None, "not a finite number"),
    ('{"reward": -1e308}', None, "not a finite number"),
    ('{"reward": 1e999}', None, "not a finite number"),
    ("{" + ",".join(f'"r{i}": 1' for i in range(65)) + "}", None, "more than 64 rewards"),
    ('{"' + "x" * 129 + '": 1}', None, "longer than 128 characters"),
])
def test_rewards_refused(json_text: str | None, txt: str | None, error: str) -> None:
    with pytest.raises(RewardError, match=error):
        parse_rewards(json_text, txt)


@pytest.mark.parametrize(("task", "service", "expected"), [
    ("hello-world", None, "toolfleet/harbor-hello-world"),
    ("Fix_Bug.v2", None, "toolfleet/harbor-fix_bug.v2"),
    ("kv store!", "kv", "toolfleet/harbor-kv-store-kv"),
    ("---", None, "toolfleet/harbor-task"),
])
def test_image_names(task: str, service: str | None, expected: str) -> None:
    assert image_name(task, service) == expected


@pytest.mark.parametrize(("dockerfile", "expected"), [
    ("FROM toolfleet/sandbox:latest\n", ["toolfleet/sandbox:latest"]),
    ("FROM --platform=linux/amd64 a:1 AS build\nFROM build\nFROM b:2\n", ["a:1", "b:2"]),
    ("ARG BASE=x\nFROM ${BASE}\n", []),
])
def test_base_images(dockerfile: str, expected: list[str]) -> None:
    assert base_images(dockerfile) == expected


def test_context_hash_follows_content_mode_args_and_base(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM toolfleet/sandbox:latest\n")
    (tmp_path / "run.sh").write_text("echo hi\n")
    first = context_hash(tmp_path, "Dockerfile")
    assert context_hash(tmp_path, "Dockerfile") == first and len(first) == 16
    seen = {first}
    (tmp_path / "run.sh").chmod(0o755)
    seen.add(context_hash(tmp_path, "Dockerfile"))
    (tmp_path / "run.sh").write_text("echo bye\n")
    seen.add(context_hash(tmp_path, "Dockerfile"))
    seen.add(context_hash(tmp_path, "Dockerfile", (("A", "1"),)))
    seen.add(context_hash(tmp_path, "Dockerfile", (), ("sha256:other-base",)))
    assert len(seen) == 5


def _sample(sid: str, value: Any, epoch: int = 1) -> EvalSample:
    return EvalSample(id=sid, epoch=epoch, input="x", target="", scores={"harbor": Score(value=value)})


def test_dict_scores_become_one_score_per_reward() -> None:
    task = Task(dataset=[], scorer=harbor_verifier())
    samples = {("a", 1): _sample("a", {"reward": 1.0, "cases": 0.5}), ("b", 1): _sample("b", {"reward": 0.0})}
    results = eval_results(task, samples, total=2)
    by_name = {s.name: (s.scorer, s.scored_samples, s.metrics["mean"].value) for s in results.scores}
    # A sample without a reward name counts 0 in that name's mean, as Harbor's mean counts it.
    assert by_name == {"reward": ("harbor", 2, 0.5), "cases": ("harbor", 2, 0.25)}
    # Over epochs, each reward is reduced per sample first.
    samples[("a", 2)] = _sample("a", {"reward": 0.0, "cases": 1.0}, epoch=2)
    results = eval_results(task, samples, total=2, epochs=2)
    by_name = {s.name: (s.scored_samples, s.metrics["mean"].value) for s in results.scores}
    assert by_name == {"reward": (2, 0.25), "cases": (2, 0.375)}


# -- malformed task directories: one line at load ------------------------------------------------------


def _task(root: Path, name: str = "t", toml: str = "", instruction: str | None = "Do it.",
          dockerfile: str | None = "FROM toolfleet/sandbox:latest\n", test: bool = True) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    if toml is not None:
        (task / "task.toml").write_text(toml)
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    if dockerfile is not None:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    if test:
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"toml": None}, "task.toml is missing"),
    ({"toml": "[agent\n"}, "task.toml is not valid TOML"),
    ({"instruction": None}, "instruction.md is missing"),
    ({"instruction": "  \n"}, "instruction.md is empty"),
    ({"test": False}, "tests/test.sh is missing"),
    ({"dockerfile": None}, "environment/ has neither a Dockerfile nor docker-compose.yaml"),
])
def test_malformed_task_is_one_error(tmp_path: Path, kwargs: dict[str, Any], error: str) -> None:
    _task(tmp_path, "good")
    _task(tmp_path, "bad", **kwargs)
    with pytest.raises(HarborTaskError, match=error) as caught:
        load_harbor(tmp_path, build=False)
    assert str(caught.value).startswith("Harbor task 'bad' (") and "\n" not in str(caught.value)


@pytest.mark.parametrize(("compose", "error"), [
    ("services: [1]\n", "needs a 'services' mapping"),
    ("services:\n  main:\n    build: ../../elsewhere\n", "context '../../elsewhere' is not inside the task"),
    ("services:\n  main:\n    build: /etc\n", "context '/etc' is not inside the task"),
    ("services:\n  main:\n    build:\n      dockerfile: ../../../x\n", "is not inside its context"),
    ("services:\n  main:\n    privileged: true\n", "'privileged' is not supported"),
    ("services:\n  main:\n    build:\n      dockerfile: Nope\n", "no environment/Nope in the task"),
    (("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
     "services:\n  main:\n    environment: {X: 1}\n    labels: [*e, *e]\n"), "more than 100,000 values"),
])
def test_compose_task_refused(tmp_path: Path, compose: str, error: str) -> None:
    task = _task(tmp_path, "pod")
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    with pytest.raises(HarborTaskError, match=error):
        load_harbor(task, build=False)


def test_not_a_task_directory(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    with pytest.raises(HarborTaskError, match="No Harbor task directories"):
        load_harbor(tmp_path, build=False)
    with pytest.raises(HarborTaskError, match="is not a directory"):
        load_harbor(tmp_path / "nowhere", build=False)


@pytest.mark.slow  # runs the CLI in a child process
@pytest.mark.parametrize("extra", [[], ["--oracle"]])
def test_cli_malformed_task_is_one_line(tmp_path: Path, extra: list[str]) -> None:
    _task(tmp_path, "broken", instruction=None)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{tmp_path}", *extra,
                           "--model", "scripted", "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [(f"toolfleet: error: Harbor task 'broken' ({tmp_path / 'broken'}): "
                                         "instruction.md is missing")], done.stderr


@pytest.mark.slow  # runs the CLI in a child process
def test_cli_oracle_needs_a_harbor_task(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", "examples/humaneval.py", "--oracle"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [("toolfleet: error: --oracle runs Harbor tasks' solutions: give harbor:DIR, "
                                        "not 'examples/humaneval.py'.")]


@pytest.mark.slow  # runs the CLI in a child process
@pytest.mark.parametrize(("task", "flags", "error"), [
    ("examples/humaneval.py", ["--task-env", "TB_URL"], ("--task-env is for Harbor tasks: give harbor:DIR, not "
                                                        "'examples/humaneval.py'.")),
    ("examples/humaneval.py", ["--timeout-multiplier", "2"], "--timeout-multiplier is for Harbor tasks"),
    ("harbor:examples/harbor", ["--timeout-multiplier", "inf"], ("--timeout-multiplier: must be a finite number above "
                                                                "0 and at most 1000, got inf.")),
    ("harbor:examples/harbor", ["--agent-timeout-multiplier", "0"], "--agent-timeout-multiplier: must be a finite"),
    ("harbor:examples/harbor", ["--build-timeout-multiplier", "nan"], "--build-timeout-multiplier: must be a finite"),
    ("harbor:examples/harbor", ["--task-env", "TOOLFLEET_SECRET"], ("--task-env TOOLFLEET_SECRET: toolfleet never "
                                                                   "passes its own TOOLFLEET_* variables to a task")),
    ("harbor:examples/harbor", ["--task-env", "GITHUB_TOKEN"], ("--task-env GITHUB_TOKEN: toolfleet never passes "
                                                               "credential-looking variables")),
])
def test_cli_harbor_flags_refused_in_one_line(tmp_path: Path, task: str, flags: list[str], error: str) -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", task, "--oracle", *flags,
                           "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("toolfleet: error: ") and error in line, line
