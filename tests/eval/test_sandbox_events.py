"""Complete transcripts: every exec in a sample's sandbox is a ``SandboxEvent`` (docs/log-format.md).

A tool's execs are recorded next to the sandbox (on the worker host, or in this process when embedded),
travel back with the call's outcome and sit in the tool's span just before its ``ToolEvent``, with the
host that ran them; the sample's files/setup and its sandbox scorers' commands are events too; model
events keep their input (an agent loop's turns share the earlier turn's head by reference). The log
exported to Inspect's format reads back with Inspect's reader, ``SandboxEvent``s included.
"""

from __future__ import annotations

import socket
import warnings
from pathlib import Path
from typing import Any

import pytest

from orchestrator.eval import eval_async
from orchestrator.log._events import full_model_inputs

TOUR = Path(__file__).resolve().parent / "tasks" / "sandbox_events.py"
TOUR_MODULE = "tests.eval.tasks.sandbox_events"
MODEL = "scripted/sandbox_events_tour"

pytestmark = pytest.mark.timeout(300)


def _tool_execs(events: list[Any]) -> list[tuple[Any, list[Any]]]:
    """Each tool event with the sandbox events that came right before it (its own execs)."""
    pairs, pending = [], []
    for e in events:
        if e.event == "sandbox" and e.phase == "tool":
            pending.append(e)
        elif e.event == "tool":
            pairs.append((e, pending))
            pending = []
    assert not pending, "sandbox events after the last tool event"
    return pairs


def _check_sample(sample: Any, hosts: set[str]) -> str:
    """The transcript of one tour: every exec, in order, on the host that ran the sample. Returns it."""
    events = sample.events
    setup = [e for e in events if e.event == "sandbox" and e.phase == "setup"]
    assert setup, "the files/setup run is on record"
    assert all(e.result == 0 and e.error is None for e in setup)
    assert "setup-out" in (setup[-1].output or "")  # the setup script's own output
    [host] = {e.host for e in setup}
    assert host in hosts

    by_function: dict[str, list[list[Any]]] = {}
    for tool_event, execs in _tool_execs(events):
        assert tool_event.host == host
        assert execs, f"{tool_event.function} ran no recorded exec"
        for e in execs:
            assert e.host == host and e.call_id == tool_event.id
            assert e.span_id == tool_event.span_id  # nested in the tool's span
            assert e.duration is not None and e.duration >= 0 and e.timestamp > 0
        by_function.setdefault(tool_event.function, []).append(execs)

    [[bash_exec]] = by_function["bash"]
    assert bash_exec.action == "exec" and bash_exec.cmd.startswith("bash --login -c ")
    assert bash_exec.result == 3 and "hello-file-" in bash_exec.output and "setup-ran" in bash_exec.output
    [[py_exec]] = by_function["python"]
    assert py_exec.result == 0 and py_exec.output == "py-42\n" and "6 * 7" in (py_exec.input or "")
    create, view = by_function["text_editor"]
    assert [e.action for e in create][-1] == "write_file" and create[-1].input == "note-body\n"
    assert any(e.action == "read_file" and e.output == "note-body\n" for e in view)
    [session] = by_function["bash_session"]
    assert "session-5" in (session[-1].output or "")
    [counted] = by_function["exec_n"]  # a user tool's own execs: exactly the three it made, in order
    assert [(e.cmd, e.output) for e in counted] == [(f"echo exec-{i}", f"exec-{i}\n") for i in range(3)]

    scorer = [e for e in events if e.event == "sandbox" and e.phase == "scorer"]
    assert [e.cmd for e in scorer] == ["bash -c 'grep -q note-body notes.txt'", "cat setup.txt"]
    assert all(e.host == host and e.result == 0 for e in scorer)
    assert scorer[1].output == "setup-ran\n"
    return host


def _check_model_inputs(sample: Any) -> None:
    models = [e for e in sample.events if e.event == "model"]
    assert len(models) == 7  # six tool turns and the answer
    full = full_model_inputs(sample.events)
    for e in models:
        assert len(full[e.uuid]) == e.input_messages
    first, last = models[0], models[-1]
    assert first.input_ref is None and [m["role"] for m in first.input] == ["user"]
    assert first.input[0]["content"] == sample.input
    # Later turns keep only what they add (the assistant call and its result), the rest by reference.
    assert last.input_ref == models[-2].uuid and len(last.input) == 2
    sent = full[last.uuid]
    assert [m["role"] for m in sent] == [m.role for m in sample.messages[:-1]]
    assert [m.get("tool_call_id") for m in sent] == [getattr(m, "tool_call_id", None) for m in sample.messages[:-1]]
    output = last.output if isinstance(last.output, dict) else last.output.model_dump()
    assert output["choices"][0]["message"]["content"] == "done"


def _check_inspect_copy(log: Any) -> None:
    import inspect_ai.log as inspect_log

    from orchestrator.eval import export_inspect_log

    path = export_inspect_log(log.location, "eval")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = inspect_log.read_eval_log(str(path))
    ours = {str(s.id): s for s in log.samples}
    for s in theirs.samples:
        mine = [e for e in ours[str(s.id)].events if e.event == "sandbox"]
        boxes = [e for e in s.events if e.event == "sandbox"]
        assert type(boxes[0]).__name__ == "SandboxEvent"
        assert [(e.action, e.cmd, e.result) for e in boxes] == [(e.action, e.cmd, e.result) for e in mine]
        assert all(e.options["host"] == m.host for e, m in zip(boxes, mine, strict=True))
        assert all(e.completed is not None and e.completed >= e.timestamp for e in boxes)
        models = [e for e in s.events if e.event == "model"]
        counted = [e.input_messages for e in ours[str(s.id)].events if e.event == "model"]
        assert [len(e.input) for e in models] == counted


@pytest.mark.celery
async def test_distributed_transcript_has_every_exec_with_its_host(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    workers = [fleet.worker(imports=(TOUR_MODULE,), slots=2, extra_args=("--loglevel", "WARNING")) for _ in range(2)]
    hosts = {w.host for w in workers}
    [log] = await eval_async(str(TOUR), MODEL, task_args={"n": 4}, broker=fleet.redis.url, log_dir=tmp_path,
                             display="none")
    assert log.status == "success", [s.error for s in log.samples]
    assert all(s.scores["sandbox_test"].value == "C" and s.scores["reads_setup"].value == "C" for s in log.samples)
    ran_on = {_check_sample(s, hosts) for s in log.samples}
    assert ran_on == hosts  # two slots each: the four samples used both workers
    _check_model_inputs(log.samples[0])
    _check_inspect_copy(log)
    for w in workers:  # at --loglevel WARNING a worker prints no debug lines
        assert "sandbox.opened" not in Path(w.log.name).read_text(errors="replace")


@pytest.mark.parametrize("sandbox_type", [pytest.param("local", marks=pytest.mark.slow),
                                          pytest.param("docker", marks=pytest.mark.docker)])
async def test_embedded_transcript_has_every_exec(tmp_path: Path, sandbox_type: str) -> None:
    [log] = await eval_async(str(TOUR), MODEL, task_args={"n": 2, "sandbox_type": sandbox_type}, log_dir=tmp_path,
                             display="none")
    assert log.status == "success", [s.error for s in log.samples]
    for s in log.samples:
        _check_sample(s, {socket.gethostname()})
        _check_model_inputs(s)
    _check_inspect_copy(log)


@pytest.mark.slow  # opens a local sandbox (a child process)
@pytest.mark.parametrize("mode", ["embedded", pytest.param("celery", marks=pytest.mark.celery)])
async def test_failing_setup_is_on_record(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    broker = None
    if mode == "celery":
        fleet = request.getfixturevalue("fleet")
        broker = fleet.redis.url
        fleet.worker(imports=(TOUR_MODULE,))
    [log] = await eval_async(str(TOUR), MODEL, task_args={"n": 1, "setup_fails": True}, broker=broker,
                             log_dir=tmp_path, display="none")
    [sample] = log.samples
    assert sample.error is not None and "exited with 7" in sample.error.message
    setup = [e for e in sample.events if e.event == "sandbox" and e.phase == "setup"]
    assert setup[-1].action == "exec" and setup[-1].result == 7 and "setup-broken" in setup[-1].output
    assert not [e for e in sample.events if e.event == "tool"]


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_a_chatty_tool_is_bounded_per_call(tmp_path: Path) -> None:
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task
    from orchestrator.model import ModelOutput, get_model
    from orchestrator.solver import generate, use_tools
    from orchestrator.util._sandbox_recorder import MAX_SANDBOX_EXECS
    from tests.eval.tasks.sandbox_events import exec_n

    def policy(messages, tools):  # type: ignore[no-untyped-def]
        if len(messages) == 1:
            return ModelOutput.for_tool_call("scripted", "exec_n", {"n": MAX_SANDBOX_EXECS + 20})
        return ModelOutput.from_content("scripted", "done")

    task = Task(dataset=[Sample(input="go", id="chatty")], solver=[use_tools(exec_n()), generate()], sandbox="local")
    [log] = await eval_async(task, get_model("scripted", policy=policy), log_dir=tmp_path, display="none")
    events = log.samples[0].events
    execs = [e for e in events if e.event == "sandbox" and e.phase == "tool"]
    assert [e.cmd for e in execs] == [f"echo exec-{i}" for i in range(MAX_SANDBOX_EXECS)]
    [note] = [e for e in events if e.event == "info" and e.source == "sandbox" and isinstance(e.data, str)]
    assert note.data.startswith("20 more sandbox exec(s)")


def test_recorded_texts_are_cut_head_and_tail_within_a_per_call_budget() -> None:
    from orchestrator._wire import SandboxExec
    from orchestrator.util._sandbox_recorder import OUTPUT_CHARS, TEXT_BUDGET, ExecList, cut

    text, was_cut = cut("a" * 3000 + "MIDDLE" + "z" * 3000, 1000)
    assert was_cut and text.startswith("a" * 500) and text.endswith("z" * 500) and "MIDDLE" not in text
    assert cut("short", 1000) == ("short", False)

    execs = ExecList()
    for i in range(60):
        execs(SandboxExec(cmd=f"cmd-{i} " + "x" * 1000, output="o" * OUTPUT_CHARS, result=0))
    kept = [e for e in execs.items if e.output is not None]
    spent = execs.items[len(kept):]
    assert 0 < len(kept) < 60 and sum(len(e.output or "") + len(e.cmd or "") for e in kept) <= TEXT_BUDGET
    assert all(e.output is None and e.truncated and e.result == 0 and len(e.cmd or "") < 400 for e in spent)
    assert spent[-1].cmd.startswith("cmd-59")


@pytest.mark.celery
async def test_worker_without_a_task_files_tool_names_the_file(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    """The worker never saw the task file: the error names the file and the --import to give, never the
    generated module name; and at --loglevel DEBUG the worker's debug lines appear. (Preflight would say so
    before the first sample: skipped here, as for a worker that joins the fleet after it.)"""
    worker = fleet.worker(extra_args=("--loglevel", "DEBUG"))
    [log] = await eval_async(str(TOUR), MODEL, task_args={"n": 1}, broker=fleet.redis.url, log_dir=tmp_path,
                             display="none", preflight=False)
    [sample] = log.samples
    message = sample.error.message if sample.error else ""
    # The first tool call is a built-in (bash); the tour reaches exec_n, the task file's own tool.
    assert "Tool 'exec_n' is not registered on this worker" in message
    assert f"--import {TOUR.resolve()}" in message
    assert "toolfleet_task_" not in message
    assert "sandbox.opened" in Path(worker.log.name).read_text(errors="replace")
