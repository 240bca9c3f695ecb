"""Registered tools for the tool-execution suite.

A module (not test-local closures) so that Celery workers can import it and rebuild the tools
by name: the same suite runs against every dispatcher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import os
import time
from pathlib import Path
from typing import Any, Optional, TypedDict

from pydantic import BaseModel

from orchestrator.tool import ToolError, ToolParsingError, tool
from orchestrator.util import LimitExceededError, OutputLimitExceededError


@tool(parallel=True)
def add():
    async def execute(x: int, y: int) -> int:
        """Add two integers.

        Args:
            x: First addend.
            y: Second addend.
        """
        return x + y

    return execute


@tool(parallel=True)
def noop():
    async def execute() -> str:
        """Do nothing and return ok."""
        return "ok"

    return execute


@tool
def noop_serial():
    async def execute() -> str:
        """Do nothing (serial) and return ok."""
        return "ok"

    return execute


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{line} {time.monotonic():.6f}\n")
        f.flush()
        os.fsync(f.fileno())


@tool(parallel=True)
def record():
    async def execute(path: str, label: str, delay: float = 0.0) -> str:
        """Append start/end lines for a label to a file, sleeping in between.

        Args:
            path: File to append to.
            label: Label to record.
            delay: Seconds to sleep between start and end.
        """
        _append(path, f"start {label}")
        await asyncio.sleep(delay)
        _append(path, f"end {label}")
        return label

    return execute


@tool(parallel=True)
def gated():
    async def execute(path: str, label: str, gate: str, bound: float = 60.0) -> str:
        """Append a start line for a label, wait (bounded) until a gate file exists, then an end line;
        a cancelled wait appends a cancelled line instead (a test's evidence that it was stopped).

        Args:
            path: File to append to.
            label: Label to record.
            gate: File whose existence lets the call finish.
            bound: Seconds to wait for the gate at most.
        """
        _append(path, f"start {label}")
        deadline = time.monotonic() + bound
        try:
            while not os.path.exists(gate):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the gate {gate} did not open within {bound:g} s")
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            _append(path, f"cancelled {label}")
            raise
        _append(path, f"end {label}")
        return label

    return execute


@tool(parallel=True)
def text_of_size():
    async def execute(n: int, char: str = "x") -> str:
        """Return a string of n copies of char.

        Args:
            n: How many copies.
            char: The character to repeat.
        """
        return char * n

    return execute


@tool(parallel=True, max_output=10)
def tiny_output():
    async def execute(n: int) -> str:
        """Return n 'y' characters (this tool's own max_output is 10 bytes).

        Args:
            n: How many characters.
        """
        return "y" * n

    return execute


class _Unserialisable:
    pass


@tool(parallel=True)
def fail():
    async def execute(kind: str, delay: float = 0.0) -> str:
        """Raise an error of the given kind.

        Args:
            kind: Which error to raise.
            delay: Seconds to wait first.
        """
        await asyncio.sleep(delay)
        match kind:
            case "timeout":
                raise TimeoutError("took too long")
            case "unicode":
                b"\xff\xfe".decode("utf-8")
            case "null_byte":
                open("/tmp/a\x00b")  # noqa: SIM115 - raises before opening: the null byte is the point
            case "permission":
                raise PermissionError(13, "Permission denied", "/root/secret")
            case "not_found":
                raise FileNotFoundError(2, "No such file or directory", "/nope.txt")
            case "is_dir":
                raise IsADirectoryError(21, "Is a directory", "/tmp")
            case "output_limit":
                raise OutputLimitExceededError("10 MiB")
            case "limit":
                raise LimitExceededError("token", value=2000, limit=1000)
            case "parsing":
                raise ToolParsingError("bad input shape")
            case "tool_error":
                raise ToolError("the tool could not do that")
            case "fatal":
                raise RuntimeError("boom")
        return "no error"

    return execute


@tool(parallel=True)
def sleeper():
    async def execute(seconds: float, marker: str = "") -> str:
        """Sleep, then write a marker file (if given) and return done.

        Args:
            seconds: How long to sleep.
            marker: A file to create after sleeping.
        """
        await asyncio.sleep(seconds)
        if marker:
            Path(marker).write_text("finished")
        return "done"

    return execute


@tool(parallel=True, timeout=0.3)
def slow_with_timeout():
    async def execute(seconds: float) -> str:
        """Sleep longer than this tool's 0.3 s timeout.

        Args:
            seconds: How long to sleep.
        """
        await asyncio.sleep(seconds)
        return "finished"

    return execute


@tool(parallel=True, timeout=0.3, timeout_behavior="raise")
def slow_raising():
    async def execute(seconds: float) -> str:
        """Sleep longer than this tool's 0.3 s timeout (raises).

        Args:
            seconds: How long to sleep.
        """
        await asyncio.sleep(seconds)
        return "finished"

    return execute


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Box(TypedDict):
    width: float
    height: float


class Person(BaseModel):
    name: str
    age: int


@tool(parallel=True)
def typed():
    async def execute(
        count: int,
        ratio: float,
        flag: bool,
        name: str,
        when: dt.datetime,
        day: dt.date,
        at: dt.time,
        color: Color,
        point: Point,
        box: Box,
        person: Person,
        numbers: list[int],
        tags: set[str],
        pair: tuple[int, str],
        scores: dict[str, float],
        points: list[Point],
        maybe: Optional[int] = None,  # noqa: UP045 - tool authors write typing.Optional: its schema is under test
        maybe_missing: int | None = None,
    ) -> str:
        """Report the Python types the arguments arrived as.

        Args:
            count: An int.
            ratio: A float.
            flag: A bool.
            name: A str.
            when: A datetime.
            day: A date.
            at: A time.
            color: An enum.
            point: A dataclass.
            box: A TypedDict.
            person: A pydantic model.
            numbers: A list of ints.
            tags: A set of strings.
            pair: A tuple.
            scores: A dict.
            points: A list of dataclasses.
            maybe: An optional int.
            maybe_missing: Another optional int.
        """
        values: dict[str, Any] = dict(locals())
        return "; ".join(f"{k}={type(v).__name__}:{v!r}" for k, v in sorted(values.items()))

    return execute


@tool(parallel=True)
def passthrough():
    async def execute(**kwargs: Any) -> str:
        """Echo every keyword argument back."""
        return ",".join(f"{k}={kwargs[k]!r}" for k in sorted(kwargs))

    return execute
