"""Inspect-compatible logs: written natively (``log_format="eval"|"json"``) and by ``toolfleet log export``,
read back with Inspect's own reader (inspect-ai is a test dependency only) and compared with ours:
sample counts, scores, message counts, metrics, model usage, event kinds."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import inspect_ai.log as inspect_log
import pytest

from orchestrator.eval import EvalLog, eval_async

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "humaneval.py"
INSPECT_EVENTS = {"model", "tool", "approval", "span_begin", "span_end", "info", "error", "sample_limit", "sandbox"}

pytestmark = pytest.mark.timeout(300)


def _read_inspect(path: Path):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return inspect_log.read_eval_log(str(path))


def _compare(ours: EvalLog, theirs) -> None:  # type: ignore[no-untyped-def]
    assert theirs.status == ours.status
    assert theirs.eval.task == ours.eval.task and theirs.eval.model == ours.eval.model
    assert len(theirs.samples) == len(ours.samples)
    by_key = {(str(s.id), s.epoch): s for s in ours.samples}
    for s in theirs.samples:
        mine = by_key[(str(s.id), s.epoch)]
        assert len(s.messages) == len(mine.messages)
        assert [m.role for m in s.messages] == [m.role for m in mine.messages]
        assert {k: v.value for k, v in s.scores.items()} == {k: v.value for k, v in mine.scores.items()}
        assert len(s.events) == len(mine.events)
        assert {e.event for e in s.events} <= INSPECT_EVENTS
        assert Counter(e.event for e in s.events)["tool"] == sum(1 for e in mine.events if e.event == "tool")
        assert (s.error is None) == (mine.error is None)
    assert ours.results is not None and theirs.results is not None
    assert [(sc.name, {k: m.value for k, m in sc.metrics.items()}) for sc in theirs.results.scores] == \
        [(sc.name, {k: m.value for k, m in sc.metrics.items()}) for sc in ours.results.scores]
    assert {k: u.total_tokens for k, u in theirs.stats.model_usage.items()} == \
        {k: u.total_tokens for k, u in ours.stats.model_usage.items()}


@pytest.mark.slow  # runs local sandboxes or the CLI in child processes
@pytest.mark.parametrize("log_format", ["eval", "json"])
async def test_humaneval_native_inspect_format(tmp_path: Path, log_format: str) -> None:
    [log] = await eval_async(str(EXAMPLE), "scripted/oracle", log_dir=tmp_path, sandbox="local", limit=10,
                             log_format=log_format)  # type: ignore[arg-type]
    exported = Path(log.location or "").with_suffix(f".{log_format}")
    assert exported.is_file()
    theirs = _read_inspect(exported)
    _compare(log, theirs)
    sample = next(s for s in theirs.samples if s.id == "HumanEval/0")
    assert [e.function for e in sample.events if e.event == "tool"] == ["bash", "text_editor", "python", "submit"]


@pytest.mark.slow  # runs local sandboxes or the CLI in child processes
async def test_log_export_command_and_hostile_text(tmp_path: Path) -> None:
    """`toolfleet log export` on a log whose model output had lone surrogates and errored samples."""
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task
    from orchestrator.model import ModelOutput, get_model
    from orchestrator.scorer import includes

    def policy(messages, tools):  # type: ignore[no-untyped-def]
        text = messages[0].text
        if text == "q1":
            raise RuntimeError("model down")
        return ModelOutput.from_content("scripted", f"t \ud83d {text}")

    task = Task(dataset=[Sample(input=f"q{i}", target="t", id=i) for i in range(3)], scorer=includes())
    [log] = await eval_async(task, get_model("scripted", policy=policy), log_dir=tmp_path, epochs=2)
    for fmt in ("eval", "json"):
        out = tmp_path / f"exported.{fmt}"
        result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "log", "export", str(log.location),
                                 "--format", fmt, "-o", str(out)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        theirs = _read_inspect(out)
        _compare(log, theirs)
        assert theirs.status == "error" and sum(1 for s in theirs.samples if s.error is not None) == 2
        assert any("\ufffd" in (s.output.completion or "") for s in theirs.samples)


@pytest.mark.parametrize(("ours", "kind"), [
    ({"event": "sandbox", "timestamp": 1.7e9, "command": ["bash", "-c", "ls"], "exit_code": 0, "duration": 0.2,
      "host": "w1", "output": "a\nb"}, "sandbox"),
    ({"event": "review", "timestamp": 1.7e9, "decision": "continue", "reviewer": "r"}, "info"),
    ({"event": "tool", "timestamp": 1.7e9, "id": "c1", "function": "bash", "arguments": {"cmd": "x"},
      "error": {"type": "sandbox_unavailable", "message": "gone"}}, "tool"),
    ({"event": "sample_limit", "timestamp": 1.7e9, "type": "operator", "message": "stop"}, "sample_limit"),
])
def test_events_map_to_inspect_event_types(ours: dict, kind: str) -> None:  # type: ignore[type-arg]
    from pydantic import TypeAdapter

    from orchestrator.eval._inspect_export import _event

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from inspect_ai.event import Event as InspectEvent

    mapped = TypeAdapter(InspectEvent).validate_python(_event(ours, "m"))
    assert mapped.event == kind
    if kind == "sandbox":
        assert mapped.cmd == "bash -c ls" and mapped.result == 0 and mapped.options == {"host": "w1", "duration": 0.2}
    if ours["event"] == "tool":
        assert mapped.error.type == "unknown" and "sandbox_unavailable" in mapped.error.message


async def test_eval_retry_rewrites_the_inspect_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.eval import eval_retry_async

    from .task_files import FLAKY

    monkeypatch.setenv("TOOLFLEET_TEST_BREAK", "1")
    [log] = await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, log_format="eval")
    copy = Path(log.location or "").with_suffix(".eval")
    assert _read_inspect(copy).status == "error"
    monkeypatch.delenv("TOOLFLEET_TEST_BREAK")
    retried = await eval_retry_async(log.location or "")
    assert retried.eval.config.log_format == "eval"
    _compare(retried, _read_inspect(copy))  # the copy follows the log: now complete
    assert _read_inspect(copy).status == "success"


@pytest.mark.slow  # runs local sandboxes or the CLI in child processes
async def test_export_a_directory(tmp_path: Path) -> None:
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task
    from orchestrator.model import get_model

    for sub in ("a", "b/c"):
        task = Task(dataset=[Sample(input="q", target="x", id=1)], name=f"t{sub[0]}")
        await eval_async(task, get_model("scripted", outputs=["x"]), log_dir=tmp_path / sub)
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "log", "export", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    exported = sorted(tmp_path.rglob("*.eval"))
    assert len(exported) == 2 and [str(p) for p in exported] == sorted(result.stdout.split())
    assert all(_read_inspect(p).status == "success" for p in exported)
