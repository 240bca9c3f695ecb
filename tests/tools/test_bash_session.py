"""``bash_session``: a PTY-held interactive shell per instance, on every driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.tool import ToolDef
from orchestrator.tool._tools import bash_session

from .helpers import error, ok

pytestmark = pytest.mark.timeout(180)

BS = bash_session(wait_for_output=10)
_SESSION_SERVER = Path(__file__).resolve().parents[2] / "orchestrator" / "tool" / "_tools" / "_session_server.py"


def test_definition():
    d = ToolDef(bash_session(timeout=60))
    assert not d.parallel
    assert "time out after 60 seconds" in d.description
    assert d.parameters.properties["action"].enum == ["type", "type_submit", "read", "interrupt", "restart"]


async def test_state_persists_between_calls(env):
    assert (await ok(env, BS, action="type_submit", input="cd /tmp && export X=42")).strip() == "$"
    assert await ok(env, BS, action="type_submit", input="echo $X $PWD") == "42 /tmp\n$ "


async def test_programs_that_prompt(env):
    assert await ok(env, BS, action="type_submit", input="read -p 'Name: ' n; echo hello $n") == "Name: "
    assert await ok(env, BS, action="type_submit", input="Bob") == "hello Bob\n$ "


async def test_python_repl(env):
    out = await ok(env, BS, action="type_submit", input="python3")
    for _ in range(5):  # bounded: on a loaded machine the interpreter may start after the idle wait returned
        if out.endswith(">>> "):
            break
        out += await ok(env, BS, action="read")
    assert out.endswith(">>> ")
    assert await ok(env, BS, action="type_submit", input="x = 6 * 7") == ">>> "
    assert await ok(env, BS, action="type_submit", input="print(x)") == "42\n>>> "
    assert await ok(env, BS, action="type_submit", input="exit()") == "$ "


async def test_type_without_enter_then_submit(env):
    assert await ok(env, BS, action="type", input="echo part") == ""
    assert await ok(env, BS, action="type_submit", input="ial") == "partial\n$ "


async def test_interrupt(env):
    assert await ok(env, BS, action="type_submit", input="sleep 1000") == ""
    assert (await ok(env, BS, action="interrupt")).endswith("$ ")
    assert await ok(env, BS, action="type_submit", input="echo after") == "after\n$ "


async def test_read_collects_later_output(env):
    await ok(env, BS, action="type_submit", input="sleep 1.5; echo later")
    out = await ok(env, BS, action="read")
    if "later" not in out:  # the first read may have returned on idle before the echo
        out += await ok(env, BS, action="read")
    assert "later" in out


async def test_restart_gives_a_fresh_shell(env):
    await ok(env, BS, action="type_submit", input="export GONE=1")
    assert await ok(env, BS, action="restart") == "Bash session restarted."
    assert await ok(env, BS, action="type_submit", input="echo [$GONE]") == "[]\n$ "


async def test_instances_are_independent(env):
    a, b = bash_session(instance="a"), bash_session(instance="b")
    await ok(env, a, action="type_submit", input="V=from-a")
    await ok(env, b, action="type_submit", input="V=from-b")
    assert await ok(env, a, action="type_submit", input="echo $V") == "from-a\n$ "
    assert await ok(env, b, action="type_submit", input="echo $V") == "from-b\n$ "


async def test_missing_input_is_an_error(env):
    _, message = await error(env, BS, action="type_submit")
    assert "`input` is required" in message


@pytest.mark.slow  # forks a shell on a PTY
def test_a_shell_slow_to_print_its_first_prompt_keeps_it_out_of_the_first_reply(tmp_path, monkeypatch) -> None:
    """On a loaded host bash may print its first prompt after any fixed pause: the server waits for the
    prompt itself (here a bash that starts 1.5 s late; the old 1 s pause put ``$ `` before the output)."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("session_server", _SESSION_SERVER)
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    slow = tmp_path / "bash"
    slow.write_text(f"#!/bin/sh\nsleep 1.5\nexec {shutil.which('bash')} \"$@\"\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    try:
        first = server.handle({"instance": "slow", "action": "type_submit", "input": "echo hi", "wait_for_output": 10})
        assert first == {"output": "hi\n$ "}
        restarted = server.handle({"instance": "slow", "action": "restart"})
        assert restarted == {"output": "Bash session restarted."}
        after = server.handle({"instance": "slow", "action": "type_submit", "input": "echo again",
                               "wait_for_output": 10})
        assert after == {"output": "again\n$ "}
    finally:
        for session in server.sessions.values():
            session.kill()
