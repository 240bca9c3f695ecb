"""``bash_session``: a PTY-held interactive shell per instance, on every driver."""

from __future__ import annotations

import pytest

from orchestrator.tool import ToolDef
from orchestrator.tool._tools import bash_session

from .helpers import error, ok

pytestmark = pytest.mark.timeout(180)

BS = bash_session(wait_for_output=10)


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
