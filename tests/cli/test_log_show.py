"""`toolfleet log show --sample`: a failed tool call shows its error, unparsed arguments are shown as sent
(not as `{}`), and events are listed one line each (`--events` for all of them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.model import ChatMessageTool, ModelOutput, get_model
from orchestrator.scorer import includes
from orchestrator.solver import generate, use_tools
from orchestrator.tool import ToolCall, tool

from .test_cli import run

BAD_JSON = '{"key": "unterminated'


@tool(runs_on="orchestrator")
def lookup():
    async def execute(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return f"value-of-{key}"

    return execute


def _policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
    turns = sum(1 for m in messages if isinstance(m, ChatMessageTool))
    if turns == 0:
        return ModelOutput.for_tool_calls("scripted", [ToolCall(
            id="c1", function="lookup", arguments={},
            parse_error=f"Error parsing the following tool call arguments:\n\n{BAD_JSON}\n\nError details: EOF")])
    if turns < 12:
        return ModelOutput.for_tool_call("scripted", "lookup", {"key": f"k{turns}"})
    return ModelOutput.from_content("scripted", "done")


@pytest.mark.slow  # runs the CLI in a child process
async def test_log_show_renders_errors_arguments_and_events(tmp_path: Path) -> None:
    task = Task(dataset=[Sample(input="go", target="done", id="a")], solver=[use_tools(lookup()), generate()],
                scorer=includes())
    [log] = await eval_async(task, get_model("scripted", policy=_policy), log_dir=tmp_path)
    n_events = len(log.samples[0].events)
    assert n_events > 20

    shown = run("log", "show", str(log.location), "--sample", "a")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "ERROR [parsing]" in out  # the failed call's tool message says why
    assert f"lookup(<not parsed: Error parsing the following tool call arguments: {BAD_JSON}" in out
    assert "lookup({})" not in out
    assert f"--- {n_events} events" in out and f"... {n_events - 20} more (--events shows all)" in out
    event_lines = [line for line in out.splitlines() if line.startswith("  ") and line[2:3].isdigit()]
    assert len(event_lines) == 20

    every = run("log", "show", str(log.location), "--sample", "a", "--events").stdout
    lines = [line for line in every.splitlines() if line.startswith("  ") and line[2:3].isdigit()]
    assert len(lines) == n_events
    assert sum(line.split()[1] == "tool" for line in lines) == 12 and any("ERROR [parsing]" in line for line in lines)


def test_a_sandbox_event_is_one_readable_line() -> None:
    from orchestrator.cli._log_cmd import event_line
    from orchestrator.log._events import SandboxEvent

    event = SandboxEvent(cmd="python3 -m unittest", result=1, duration=0.25, host="w-1", phase="scorer",
                         output="FAILED (failures=1)")
    line = event_line(event)
    assert "\n" not in line
    assert line.endswith('sandbox [scorer] "python3 -m unittest" -> exit 1 (0.250s) on w-1')
    write = event_line(SandboxEvent(action="write_file", file="/home/sandbox/a.py", phase="setup"))
    assert write.endswith("sandbox [setup] \"write_file /home/sandbox/a.py\"")
    service = event_line(SandboxEvent(cmd="pg_isready", result=0, phase="tool", service="db"))
    assert service.endswith('sandbox [tool] @db "pg_isready" -> exit 0')  # a multi-service sandbox's container
