"""Model and sandbox output driving the operator's terminal.

Before: ``toolfleet log show --sample`` printed OSC/CSI sequences from tool output unescaped (window
title, clear screen, clipboard write via OSC 52). Now every CLI path printing such text escapes
control characters (``orchestrator.util._terminal``). A real sandbox prints the sequences; the CLI runs
as users run it, on a pipe and on a real pseudo-terminal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.model import ChatMessageTool, ModelOutput, get_model
from orchestrator.scorer import includes
from orchestrator.solver import generate, use_tools
from orchestrator.tool import bash
from orchestrator.util._terminal import json_terminal_safe, terminal_safe
from tests.support import console
from tests.support.fleet import REPO_ROOT

pytestmark = pytest.mark.timeout(120)

# Window title (OSC 0, BEL-terminated), clipboard write (OSC 52), clear screen (CSI 2J), 8-bit CSI,
# (UTF-8 encoded, as a terminal reads it), a carriage return over the line, a right-to-left override.
HOSTILE_PRINTF = r"printf 'A\033]0;pwned\007B\033]52;c;cHduZWQ=\007C\033[2JD\302\2332JE\rF\342\200\256G\n'"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\r", "\u202e")

TABLE = {
    "osc title": ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    "osc 52 clipboard": ("\x1b]52;c;cHduZWQ=\x1b\\", "\\x1b]52;c;cHduZWQ=\\x1b\\"),
    "csi clear": ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
    "8-bit csi": ("\x9b2J", "\\x9b2J"),
    "carriage return": ("ok\rFAKE", "ok\\x0dFAKE"),
    "backspace, del": ("a\bb\x7f", "a\\x08b\\x7f"),
    "bidi override": ("abc\u202edef", "abc\\u202edef"),
    "newlines and tabs stay": ("a\n\tb", "a\n\tb"),
    "printable unicode stays": ("é ✓ 漢字 🙂", "é ✓ 漢字 🙂"),
}


@pytest.mark.parametrize(("raw", "shown"), TABLE.values(), ids=TABLE.keys())
def test_terminal_safe(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown


def test_json_stays_valid_and_equal() -> None:
    value = {"out": "x\x9b2J\u202e\x7f y"}
    text = json.dumps(value, ensure_ascii=False)
    safe = json_terminal_safe(text)
    assert not any(c in safe for c in ("\x9b", "\u202e", "\x7f")) and json.loads(safe) == value


def _policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
    if not any(isinstance(m, ChatMessageTool) for m in messages):
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": HOSTILE_PRINTF})
    return ModelOutput.from_content("scripted", "done \x1b]0;model-title\x07")


@pytest.fixture(scope="module")
def hostile_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    tmp = tmp_path_factory.mktemp("hostile")
    task = Task(dataset=[Sample(input="go", target="done", id="a")], solver=[use_tools(bash()), generate()],
                scorer=includes(), sandbox="local")
    [log] = asyncio.run(eval_async(task, get_model("scripted", policy=_policy), log_dir=tmp))
    assert log.status == "success", [s.error for s in log.samples]
    text = Path(log.location).read_text()
    assert "\\u001b]0;pwned" in text  # the sandbox really printed the sequences (the log keeps them, escaped)
    return Path(log.location)


def _cli(*args: str) -> str:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow  # runs the CLI or a console in a child process
def test_log_show_escapes_tool_and_model_output(hostile_log: Path) -> None:
    out = _cli("log", "show", str(hostile_log), "--sample", "a", "--events")
    assert "A\\x1b]0;pwned\\x07B\\x1b]52;c;cHduZWQ=\\x07C\\x1b[2JD\\x9b2JE\\x0dF\\u202eG" in out
    assert "done \\x1b]0;model-title\\x07" in out
    assert not any(c in out for c in RAW_CONTROLS)


@pytest.mark.slow  # runs the CLI or a console in a child process
def test_log_dump_to_a_terminal_is_escaped_and_still_json(hostile_log: Path) -> None:
    piped = _cli("log", "dump", str(hostile_log))  # a pipe: exact JSON, as before
    child = pexpect.spawn(sys.executable, ["-m", "orchestrator.cli", "log", "dump", str(hostile_log)],
                          cwd=str(REPO_ROOT),
                          encoding="utf-8", timeout=60, dimensions=(50, 200))
    child.expect(pexpect.EOF)
    shown = child.before.replace("\r\n", "\n")
    assert not any(c in shown for c in ("\x1b", "\x07", "\x9b", "\u202e"))
    assert json.loads(shown) == json.loads(piped)


@pytest.mark.slow  # runs the CLI or a console in a child process
def test_the_approval_console_escapes_the_call() -> None:
    child = console.spawn("approve", "--command", "ls \x1b]0;pwned\x07\x1b[2J\u202eexe.txt")
    child.expect(r"Decision \(")
    shown = child.before
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eexe.txt" in shown
    assert not any(c in shown for c in ("\x1b]0;pwned", "\x07", "\u202e"))
    child.sendline("reject")
    child.expect("Explanation")
    child.sendline("no")
    console.finish(child)


def test_the_live_display_escapes_names_and_notices() -> None:
    """A third party's task file names the task; a resumed log's path is shown as a notice."""
    import io

    from rich.console import Console

    from orchestrator.eval._display import RichDisplay
    from orchestrator.eval._progress import EvalProgress

    progress = EvalProgress(task="evil\x1b]0;pwned\x07[bold]x", model="m\x9b2J", log="/tmp/l\u202eog",
                            total=1, notice="resuming \x1b[2J")
    display = RichDisplay(progress, file=io.StringIO())
    out = io.StringIO()
    Console(file=out, force_terminal=False, color_system=None, width=200).print(display.render())
    shown = out.getvalue()
    assert "evil\\x1b]0;pwned\\x07[bold]x" in shown and "m\\x9b2J" in shown and "resuming \\x1b[2J" in shown
    assert not any(c in shown for c in ("\x1b", "\x07", "\x9b", "\u202e"))
