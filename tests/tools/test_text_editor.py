"""``text_editor``: every command and its errors, on every driver."""

from __future__ import annotations

import pytest

from orchestrator.tool import ToolDef
from orchestrator.tool._tools import text_editor

from .helpers import error, ok

pytestmark = pytest.mark.timeout(120)

TE = text_editor()


@pytest.fixture
async def home(env) -> str:
    home = (await env.exec(["pwd"])).stdout.strip()
    await env.exec(["mkdir", "-p", "proj/sub"])
    await env.write_file("proj/a.py", "one\ntwo\nthree\n")
    return f"{home}/proj"


def test_definition():
    d = ToolDef(TE)
    assert not d.parallel  # serial: edits apply in declared order
    assert "time out after 180 seconds" in d.description
    assert d.parameters.properties["command"].enum == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert d.parameters.required == ["command", "path"]


async def test_view_file_with_line_numbers_and_ranges(env, home):
    out = await ok(env, TE, command="view", path=f"{home}/a.py")
    assert out == f"Here's the result of running `cat -n` on {home}/a.py:\n     1\tone\n     2\ttwo\n     3\tthree\n"
    assert "     2\ttwo\n     3\tthree" in await ok(env, TE, command="view", path=f"{home}/a.py", view_range=[2, -1])
    ranged = await ok(env, TE, command="view", path=f"{home}/a.py", view_range=[1, 2])
    assert "     2\ttwo" in ranged and "three" not in ranged


async def test_view_errors(env, home):
    kind, message = await error(env, TE, command="view", path=f"{home}/a.py", view_range=[0, 2])
    assert kind == "unknown" and "Invalid `view_range`" in message
    kind, message = await error(env, TE, command="view", path=f"{home}/a.py", view_range=[2, 9])
    assert "Invalid `view_range`" in message
    kind, message = await error(env, TE, command="view", path=f"{home}/missing.py")
    assert "does not exist" in message
    kind, message = await error(env, TE, command="view", path=home, view_range=[1, 2])
    assert "not allowed when `path` points to a directory" in message


async def test_view_directory_lists_two_levels_without_hidden(env, home):
    await env.write_file("proj/sub/deep/x.txt", "x")
    await env.write_file("proj/.hidden", "h")
    out = await ok(env, TE, command="view", path=home)
    assert f"{home}/a.py" in out and f"{home}/sub/deep" in out
    assert ".hidden" not in out and "x.txt" not in out


async def test_view_non_utf8_is_a_decode_error(env, home):
    await env.write_file("proj/bin.dat", b"\xff\xfe\x00bad")
    kind, _ = await error(env, TE, command="view", path=f"{home}/bin.dat")
    assert kind == "unicode_decode"


async def test_create_and_its_errors(env, home):
    assert await ok(env, TE, command="create", path=f"{home}/new/b.txt", file_text="hi\n") == (
        f"File created successfully at: {home}/new/b.txt"
    )
    assert await env.read_file(f"{home}/new/b.txt") == "hi\n"
    _, message = await error(env, TE, command="create", path=f"{home}/a.py", file_text="x")
    assert "already exists" in message
    assert await env.read_file(f"{home}/a.py") == "one\ntwo\nthree\n"
    _, message = await error(env, TE, command="create", path=home, file_text="x")
    assert "is a directory" in message
    _kind, message = await error(env, TE, command="create", path=f"{home}/c.txt")
    assert "`file_text` is required" in message


async def test_str_replace_requires_exactly_one_match(env, home):
    out = await ok(env, TE, command="str_replace", path=f"{home}/a.py", old_str="two", new_str="TWO")
    assert "has been edited" in out and "     2\tTWO" in out
    assert await env.read_file(f"{home}/a.py") == "one\nTWO\nthree\n"
    _, message = await error(env, TE, command="str_replace", path=f"{home}/a.py", old_str="zzz", new_str="y")
    assert message == f"No replacement was performed, old_str `zzz` did not appear verbatim in {home}/a.py."
    await env.write_file("proj/dup.txt", "x = 1\nx = 1\n")
    _, message = await error(env, TE, command="str_replace", path=f"{home}/dup.txt", old_str="x = 1", new_str="y")
    assert "Found 2 occurrences" in message and "[1, 2]" in message
    assert await env.read_file(f"{home}/dup.txt") == "x = 1\nx = 1\n"
    # new_str omitted deletes old_str
    await ok(env, TE, command="str_replace", path=f"{home}/a.py", old_str="TWO\n")
    assert await env.read_file(f"{home}/a.py") == "one\nthree\n"
    _, message = await error(env, TE, command="str_replace", path=home, old_str="a", new_str="b")
    assert "only the `view` command" in message


async def test_insert(env, home):
    await ok(env, TE, command="insert", path=f"{home}/a.py", insert_line=0, new_str="zero")
    await ok(env, TE, command="insert", path=f"{home}/a.py", insert_line=2, new_str="one-and-a-half")
    await ok(env, TE, command="insert", path=f"{home}/a.py", insert_line=5, new_str="four")
    assert await env.read_file(f"{home}/a.py") == "zero\none\none-and-a-half\ntwo\nthree\nfour\n"
    _, message = await error(env, TE, command="insert", path=f"{home}/a.py", insert_line=99, new_str="x")
    assert "Invalid `insert_line` parameter: 99" in message and "[0, 6]" in message
    _, message = await error(env, TE, command="insert", path=f"{home}/a.py", new_str="x")
    assert "`insert_line` is required" in message


async def test_undo_edit_keeps_the_last_edits_per_file(env, home):
    await ok(env, TE, command="str_replace", path=f"{home}/a.py", old_str="one", new_str="1")
    await ok(env, TE, command="insert", path=f"{home}/a.py", insert_line=3, new_str="4")
    await ok(env, TE, command="create", path=f"{home}/other.txt", file_text="o")
    assert "undone successfully" in await ok(env, TE, command="undo_edit", path=f"{home}/a.py")
    assert await env.read_file(f"{home}/a.py") == "1\ntwo\nthree\n"
    await ok(env, TE, command="undo_edit", path=f"{home}/a.py")
    assert await env.read_file(f"{home}/a.py") == "one\ntwo\nthree\n"
    _, message = await error(env, TE, command="undo_edit", path=f"{home}/a.py")
    assert message == f"No edit history found for {home}/a.py."
    await ok(env, TE, command="undo_edit", path=f"{home}/other.txt")  # undoing a create removes the file
    assert (await env.exec(["test", "-e", f"{home}/other.txt"])).returncode != 0


async def test_history_survives_tool_rebuilds(env, home):
    """Workers rebuild the tool per call: undo history lives with the sandbox, not the instance."""
    await ok(env, text_editor(), command="str_replace", path=f"{home}/a.py", old_str="one", new_str="1")
    await ok(env, text_editor(), command="undo_edit", path=f"{home}/a.py")
    assert await env.read_file(f"{home}/a.py") == "one\ntwo\nthree\n"
