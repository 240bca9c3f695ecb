"""The HumanEval example end to end: oracle passes everything, wrong fails everything.

Embedded + local runs all 164 problems; the docker and Celery runs take a prefix (the full runs are
``toolfleet bench humaneval``, which reports them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.eval import eval_async

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "humaneval.py"


def _tally(log) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    correct = sum(1 for s in log.samples if s.error is None and s.scores["sandbox_test"].value == "C")
    errors = sum(1 for s in log.samples if s.error is not None)
    return correct, len(log.samples), errors


@pytest.mark.slow  # 164 samples in local sandboxes (child processes)
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("policy", "expected"), [("oracle", 164), ("wrong", 0)])
async def test_embedded_local_all_problems(tmp_path: Path, policy: str, expected: int) -> None:
    [log] = await eval_async(str(EXAMPLE), f"scripted/{policy}", log_dir=tmp_path, sandbox="local")
    assert _tally(log) == (expected, 164, 0)
    sample = next(s for s in log.samples if s.id == "HumanEval/0")
    tools = [e.function for e in sample.events if e.event == "tool"]
    assert tools == ["bash", "text_editor", "python", "submit"]  # found the directory, wrote, ran, submitted
    explanation = sample.scores["sandbox_test"].explanation or ""
    assert explanation.startswith("Tests passed" if policy == "oracle" else "Tests failed")


@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("policy", "expected"), [("oracle", 20), ("wrong", 0)])
async def test_embedded_docker(tmp_path: Path, policy: str, expected: int) -> None:
    [log] = await eval_async(str(EXAMPLE), f"scripted/{policy}", log_dir=tmp_path, sandbox="docker", limit=20,
                             max_sandboxes=8)
    assert _tally(log) == (expected, 20, 0)


@pytest.mark.celery
@pytest.mark.timeout(600)
async def test_through_celery_workers(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(concurrency=32, slots=32)
    [log] = await eval_async(str(EXAMPLE), "scripted/oracle", log_dir=tmp_path, sandbox="local", limit=20,
                             broker=fleet.redis.url)
    assert _tally(log) == (20, 20, 0)
    assert all(e.host for s in log.samples for e in s.events if e.event == "tool" and e.function == "python")
