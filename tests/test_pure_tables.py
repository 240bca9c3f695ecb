"""Pure functions tested by tables: stage planner, truncation, error classification, call globs."""

from __future__ import annotations

import pytest

from orchestrator._glob import match_call
from orchestrator.execute._planner import plan_stages
from orchestrator.model._truncate import ENVELOPE, effective_limit, truncate_output
from orchestrator.tool import ToolApprovalError, ToolError, ToolParsingError
from orchestrator.tool._classify import classify_exception
from orchestrator.tool._depth import exceeds_max_depth
from orchestrator.util import LimitExceededError, OutputLimitExceededError, SandboxUnavailableError
from workers.sandbox._channel import _seconds

PARALLEL = {"bash", "python", "p"}


@pytest.mark.parametrize(
    ("calls", "stages"),
    [
        ("", []),
        ("p", [["p"]]),
        ("s", [["s"]]),
        ("p p p", [["p", "p", "p"]]),
        ("s s", [["s"], ["s"]]),
        ("p p s p p", [["p", "p"], ["s"], ["p", "p"]]),
        ("s p p s", [["s"], ["p", "p"], ["s"]]),
        ("bash bash unknown python", [["bash", "bash"], ["unknown"], ["python"]]),
        ("unknown unknown", [["unknown"], ["unknown"]]),
        ("p unknown p", [["p"], ["unknown"], ["p"]]),
    ],
)
def test_stage_planner(calls: str, stages: list[list[str]]) -> None:
    assert plan_stages(calls.split(), lambda c: c in PARALLEL) == stages


def _wrapped(tool: str, inner: str) -> str:
    return ENVELOPE.format(tool=tool, truncated=inner)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("a" * 16, 16, None),  # exactly at the limit: untouched
        ("a" * 8 + "b" * 9, 16, ("a" * 8 + "b" * 8, 17)),  # one byte over: head and tail joined directly (Inspect)
        ("abc", 0, None),  # 0 disables
        ("é" * 10, 7, ("é" + "éé", 20)),  # 2-byte chars: never split a character
        ("€" * 5, 8, ("€" + "€", 15)),  # 3-byte chars
    ],
)
def test_truncation(text: str, limit: int, expected: tuple[str, int] | None) -> None:
    cut = truncate_output(text, "bash", limit)
    if expected is None:
        assert cut is None
    else:
        assert cut is not None
        assert cut.text == _wrapped("bash", expected[0])
        assert (cut.original_bytes, cut.limit) == (expected[1], limit)


def test_truncation_envelope_is_exact() -> None:
    assert ENVELOPE == (
        "\nThe output of your call to {tool} was too long to be displayed.\n"
        "Here is a truncated version:\n<START_TOOL_OUTPUT>\n{truncated}\n<END_TOOL_OUTPUT>\n"
    )


@pytest.mark.parametrize(
    ("tool", "call", "config", "limit"),
    [
        (None, None, None, 16 * 1024),
        (None, None, 100, 100),
        (None, 50, 100, 50),
        (10, 50, 100, 10),
        (0, 50, 100, 0),
        (None, 0, 100, 0),
    ],
)
def test_max_output_precedence(tool, call, config, limit) -> None:
    assert effective_limit(tool, call, config) == limit


def _unicode_error() -> UnicodeDecodeError:
    try:
        b"\xff".decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError


@pytest.mark.parametrize(
    ("exc", "kind", "message"),
    [
        (TimeoutError("x"), "timeout", "Command timed out before completing."),
        (_unicode_error(), "unicode_decode", "Error decoding bytes to utf-8: invalid start byte"),
        (ValueError("embedded null byte"), "parsing", "An argument to tool 'fn' contained an embedded null byte."),
        (PermissionError(13, "Permission denied", "/x"), "permission", "Permission denied. Filename '/x'."),
        (FileNotFoundError(2, "No such file", "/y"), "file_not_found", "File '/y' was not found."),
        (IsADirectoryError(21, "Is a directory", "/d"), "is_a_directory", "Is a directory. Filename '/d'."),
        (OutputLimitExceededError("10 MiB"), "limit", "The tool exceeded its output limit of 10 MiB."),
        (LimitExceededError("token", 5, 4), "limit", "The tool exceeded its token limit of 4."),
        (SandboxUnavailableError("The worker host died."), "sandbox_unavailable", "The worker host died."),
        (ToolParsingError("bad"), "parsing", "bad"),
        (ToolApprovalError("no"), "approval", "no"),
        (ToolApprovalError(""), "approval", "Tool call not approved."),
        (ToolError("oops"), "unknown", "oops"),
    ],
)
def test_error_classification(exc: BaseException, kind: str, message: str) -> None:
    error = classify_exception(exc, "fn")
    assert error is not None
    assert (error.type, error.message) == (kind, message)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("other"), KeyError("k"), OSError("os")])
def test_other_exceptions_are_fatal(exc: BaseException) -> None:
    assert classify_exception(exc, "fn") is None


@pytest.mark.parametrize(
    ("pattern", "function", "arguments", "matches"),
    [
        ("*", "bash", {}, True),
        ("bash", "bash", {"command": "ls"}, True),
        ("bash", "python", {}, False),
        ("py*", "python", {}, True),
        ("bash(command='rm*')", "bash", {"command": "rm -rf /"}, True),
        ("bash(command='rm*')", "bash", {"command": "ls; rm x"}, False),
        ("bash(command='*rm*')", "bash", {"command": "ls; rm x"}, True),
        ("bash(command='rm*')", "python", {"command": "rm x"}, False),
        ("bash(command='rm*')", "bash", {}, False),
        ("text_editor(command='view', path='/etc/*')", "text_editor", {"command": "view", "path": "/etc/passwd"}, True),
        ("text_editor(command='view', path='/etc/*')", "text_editor", {"command": "create", "path": "/etc/passwd"},
         False),
        ('bash(command="a, b")', "bash", {"command": "a, b"}, True),
        ("add(x=3)", "add", {"x": 3, "y": 1}, True),
        ("add(x=3)", "add", {"x": 4}, False),
        ("Bash", "bash", {}, False),
    ],
)
def test_call_globs(pattern: str, function: str, arguments: dict, matches: bool) -> None:
    assert match_call(pattern, function, arguments) is matches


def test_invalid_pattern_is_rejected() -> None:
    with pytest.raises(ValueError, match="Invalid tool pattern"):
        match_call("bash(=)", "bash", {})


@pytest.mark.parametrize(("value", "depth"), [(1, 0), ({}, 1), ({"a": [1]}, 2), ({"a": {"b": {"c": [[]]}}}, 5)])
def test_argument_depth(value, depth) -> None:
    assert not exceeds_max_depth(value, depth)
    assert exceeds_max_depth(value, depth - 1) is (depth > 0)


@pytest.mark.parametrize(
    ("reported", "admitted"),
    [(0.25, 0.25), (3, 3.0), (0, 0.0), (None, None), ("0.2", None), (True, None), (-1.0, None),
     (float("inf"), None), (float("nan"), None), ([1], None), ({"s": 1}, None)],
)
def test_a_duration_from_the_agent_is_admitted_only_as_a_finite_non_negative_number(reported, admitted) -> None:
    assert _seconds(reported) == admitted
