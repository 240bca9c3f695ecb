"""The eval survives any model output: lone surrogates and deep nesting in tool
arguments, file texts and assistant text never end the eval; the log stays valid UTF-8 JSON and readable,
and later samples still run. Real eval, scripted model, embedded local sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async, read_eval_log
from orchestrator.eval._log_file import EvalSample, LogWriter
from orchestrator.eval._loggable import MAX_LOG_DEPTH, loggable, safe_text
from orchestrator.model import ChatMessageTool, ModelOutput, get_model
from orchestrator.scorer import includes
from orchestrator.solver import generate, sample_state, use_tools
from orchestrator.tool import bash, text_editor, tool

pytestmark = pytest.mark.timeout(120)

LONE = "\ud83d"  # the first half of an emoji, as a model cut mid-character gives


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _deep(n: int) -> Any:
    value: Any = "bottom"
    for _ in range(n):
        value = {"a": value}
    return value


@tool(runs_on="orchestrator")
def echo_args():
    async def execute(payload: Any = None, text: str = "") -> str:
        """Echo what it was given.

        Args:
            payload: Anything.
            text: Some text.
        """
        return f"got {text}"

    return execute


# What each sample's model does on its first turn (a tool call, or plain text).
HOSTILE: dict[str, Any] = {
    "surrogate-arg": ("echo_args", {"text": f"half {LONE} emoji"}),
    "deep-300": ("echo_args", {"payload": _deep(300)}),
    "deep-1500": ("echo_args", {"payload": _deep(1500)}),
    "file-text": ("text_editor", {"command": "create", "path": "/tmp/toolfleet-hostile.txt",
                                  "file_text": f"a {LONE} b"}),
    "bash-surrogate": ("bash", {"cmd": f"echo {LONE}"}),
    "text": None,
}


def _policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None
    sid = str(state.sample_id)
    if sid in HOSTILE and not any(isinstance(m, ChatMessageTool) for m in messages):
        if HOSTILE[sid] is None:
            return ModelOutput.from_content("scripted", f"answer {LONE} with a broken emoji")
        function, arguments = HOSTILE[sid]
        return ModelOutput.for_tool_call("scripted", function, arguments, content=f"calling {LONE}")
    return ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")


@pytest.mark.slow  # runs its samples in local sandboxes (child processes)
async def test_eval_survives_hostile_model_output(tmp_path: Path) -> None:
    ids = [*HOSTILE, "after-1", "after-2"]
    task = Task(dataset=[Sample(input=f"q {i}", target=f"t-{i}", id=i) for i in ids],
                solver=[use_tools(echo_args(), text_editor(), bash()), generate()], scorer=includes(), sandbox="local")
    # One sample at a time: the ordinary samples after the hostile ones must still run.
    [log] = await eval_async(task, get_model("scripted", policy=_policy), log_dir=tmp_path, max_samples=1)

    raw = Path(log.location or "").read_bytes()
    raw.decode("utf-8")  # strict: no lone surrogates reached the file
    for line in raw.splitlines():
        json.loads(line)

    again = read_eval_log(log.location or "")
    by_id = {str(s.id): s for s in again.samples}
    assert set(by_id) == set(ids)
    assert again.status in ("success", "error")
    assert again.results is not None and again.results.total_samples == len(ids)
    # Ordinary samples after the hostile ones ran and scored.
    for sid in ("after-1", "after-2"):
        assert by_id[sid].error is None and by_id[sid].scores["includes"].value == "C", by_id[sid].messages
    # Lone surrogates became U+FFFD in assistant text and in arguments; nothing was lost silently.
    assert "\ufffd" in (by_id["text"].output.completion if by_id["text"].output else "")
    dumped = json.dumps([s.model_dump(mode="json") for s in again.samples], ensure_ascii=False)
    assert "\ufffd" in dumped and LONE not in dumped
    sample_text = json.dumps(by_id["surrogate-arg"].model_dump(mode="json"), ensure_ascii=False)
    assert "half \ufffd emoji" in sample_text
    assert "\ufffd" in json.dumps(by_id["file-text"].model_dump(mode="json"), ensure_ascii=False)
    # Depth is bounded in the log: over-deep arguments never enter a ToolCall (the model gets
    # Inspect's parsing error instead), and anything else too deep is cut by a marker.
    deep_text = json.dumps(by_id["deep-1500"].model_dump(mode="json"))
    assert "maximum supported nesting depth of 100" in deep_text or "nested deeper than" in deep_text \
        or by_id["deep-1500"].error is not None
    # Whatever form the bound takes, no line of the file nests anywhere near the 1500 levels sent.
    assert max(_depth(json.loads(line)) for line in raw.splitlines()) <= MAX_LOG_DEPTH + 20


def test_loggable_replaces_surrogates_and_cuts_depth() -> None:
    assert safe_text(f"a{LONE}b") == "a\ufffdb"
    assert safe_text("\ud83d\ude00") == "\U0001f600"  # a valid pair held as two code points is joined
    assert safe_text("plain ✓") == "plain ✓"
    cut = loggable({"k": _deep(MAX_LOG_DEPTH + 50), LONE: [LONE]})
    assert json.dumps(cut, ensure_ascii=False).encode("utf-8")
    depth, node = 0, cut["k"]
    while isinstance(node, dict):
        depth, node = depth + 1, node["a"]
    assert depth < MAX_LOG_DEPTH and "nested deeper than" in node
    assert cut["\ufffd"] == ["\ufffd"]


async def test_a_sample_that_cannot_be_logged_is_that_samples_error(tmp_path: Path) -> None:
    """Anything the writer cannot serialise becomes that sample's error; the eval goes on."""

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text form")

    original = LogWriter.sample

    async def sample_with_poison(self: LogWriter, sample: EvalSample) -> None:
        if str(sample.id) == "1" and sample.error is None:
            sample.metadata["poison"] = Unprintable()  # pydantic cannot serialise it
        await original(self, sample)

    LogWriter.sample = sample_with_poison  # type: ignore[method-assign]
    try:
        task = Task(dataset=[Sample(input=f"q{i}", target="x", id=i) for i in range(4)], scorer=includes())
        [log] = await eval_async(task, get_model("scripted", policy=lambda m, t: "x"), log_dir=tmp_path,
                                 max_samples=1)
    finally:
        LogWriter.sample = original  # type: ignore[method-assign]
    by_id = {str(s.id): s for s in read_eval_log(log.location or "").samples}
    assert set(by_id) == {"0", "1", "2", "3"}
    assert by_id["1"].error is not None and by_id["1"].error.type == "LogWriteError"
    assert "Unprintable" in by_id["1"].error.message
    assert all(by_id[i].error is None for i in ("0", "2", "3"))
