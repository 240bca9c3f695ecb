"""``examples/swe_mini.py`` end to end: per-sample images built by the example's script, ``files`` and
``setup``, the scripted fixer (every sample correct) and noop (none), embedded with Docker and through
Redis with two real workers on this machine; without images (repositories sent as directories) in
a local sandbox; and a setup that fails (the "failing" test already passes) failing its sample.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.eval import Task, eval_async
from tests.benchmarks.swe import ContainerCounter, StartCounter

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "swe_mini.py"
BUILD = ROOT / "examples" / "swe_mini" / "build_images.sh"
NAMES = ["api", "calc", "clamp", "leap", "slug", "stack"]
SINGLE = [name for name in NAMES if name != "api"]  # "api" has a second container: its price service

pytestmark = pytest.mark.timeout(900)


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("swe_mini_example_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def swe_images(sandbox_image: str) -> list[str]:
    """The example's images, built by its own script (cached by Docker after the first build)."""
    done = subprocess.run(["sh", str(BUILD)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return [f"toolfleet/swe-mini-{name}:latest" for name in NAMES] + ["toolfleet/swe-mini-api-server:latest"]


def _scores(log: Any) -> dict[str, str]:
    assert log.status == "success", [s.error for s in log.samples]
    assert all(s.error is None for s in log.samples), [s.error for s in log.samples]
    return {str(s.id): s.scores["tests_pass"].value for s in log.samples}


@pytest.mark.docker
@pytest.mark.parametrize(("policy", "expected"), [("fixer", "C"), ("noop", "I")])
async def test_embedded_docker(tmp_path: Path, swe_images: list[str], policy: str, expected: str) -> None:
    [log] = await eval_async(str(EXAMPLE), f"scripted/{policy}", log_dir=tmp_path, sandbox="docker")
    assert _scores(log) == dict.fromkeys(NAMES, expected)
    calc = next(s for s in log.samples if s.id == "calc")
    tools = [e for e in calc.events if e.event == "tool"]
    assert [e.function for e in tools] == (["bash", "text_editor", "bash", "submit"] if policy == "fixer"
                                           else ["bash", "bash", "submit"])
    look = str(tools[0].result)
    # The image's checkout, the inline ISSUE.md and the failing test from a local file all arrived.
    assert look.startswith("/home/sandbox") and "mean([1, 2, 3]) returns 3.0" in look and "test_mean_of_three" in look
    _assert_service_was_asked(log)


def _assert_service_was_asked(log: Any) -> None:
    """The "api" sample's tests reached its second container, and its scorer read that container's log."""
    api = next(s for s in log.samples if s.id == "api")
    reads = [e for e in api.events if e.event == "sandbox" and e.action == "read_file"
             and e.file == "/tmp/requests.log"]
    assert len(reads) == 1 and "GET /price/apple" in (reads[0].output or ""), reads


@pytest.mark.docker
@pytest.mark.celery
async def test_two_workers_through_redis(tmp_path: Path, swe_images: list[str],
                                         fleet) -> None:  # type: ignore[no-untyped-def]
    slots = 2
    workers = [fleet.anonymous_worker(slots=slots), fleet.anonymous_worker(slots=slots)]  # no --hostname, as users do
    pids = [w.pid for w in workers]
    counter = ContainerCounter(pids, interval=0.1)
    async with StartCounter() as starts, counter.running():
        [log] = await eval_async(str(EXAMPLE), "scripted/fixer", log_dir=tmp_path, broker=fleet.redis.url)
    assert _scores(log) == dict.fromkeys(NAMES, "C")
    _assert_service_was_asked(log)
    hosts = {e.host for s in log.samples for e in s.events if e.event == "tool" and e.function == "bash"}
    assert hosts and hosts <= {w.host for w in workers}
    for sample in log.samples:  # the log says where each sample ran and on which image
        [opened] = [e.data for e in sample.events if e.event == "info" and e.source == "sandbox"]
        assert opened["image"] == f"toolfleet/swe-mini-{sample.id}:latest" and opened["host"] in hosts, opened
    # One container per sample, two for "api" (pool_size 0: no spares), never more per worker than its slots, and
    # nothing left on either worker after the eval.
    assert sum(starts.starts(pids)) == len(NAMES) + 1
    assert max(counter.peaks) >= 1 and all(peak <= slots for peak in counter.peaks), counter.peaks
    assert await counter.counts() == [0, 0]


@pytest.mark.slow  # runs its samples in local sandboxes (child processes)
async def test_without_images_repositories_travel_as_directories(tmp_path: Path) -> None:
    [log] = await eval_async(str(EXAMPLE), "scripted/fixer", log_dir=tmp_path, task_args={"images": False})
    assert _scores(log) == dict.fromkeys(SINGLE, "C")


@pytest.mark.slow  # runs its samples in local sandboxes (child processes)
async def test_a_failing_setup_fails_its_sample(tmp_path: Path) -> None:
    example = _example()
    broken = example.make_sample("leap", images=False)
    assert broken.files is not None
    broken.files["repo/tests/test_issue.py"] = "import unittest\n"  # no failing test: setup refuses it
    good = example.make_sample("calc", images=False)
    task = Task(dataset=[broken, good], solver=example.swe_mini(images=False).solver,
                scorer=example.swe_mini(images=False).scorer, sandbox="local")
    [log] = await eval_async(task, "scripted/fixer", log_dir=tmp_path, fail_on_error=False)
    by_id = {s.id: s for s in log.samples}
    assert by_id["calc"].error is None and by_id["calc"].scores["tests_pass"].value == "C"
    error = by_id["leap"].error
    assert error is not None and "Setup for sample" in error.message and "exited with 1" in error.message
    assert "already passes" in error.message
