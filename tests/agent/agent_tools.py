"""Registered tools for the agent tests (a module, so Celery workers can import it and rebuild them by name)."""

from __future__ import annotations

import asyncio

from orchestrator.tool import ToolError, tool
from tests.support.sample_tools import add  # noqa: F401  (one registered 'add' for every suite)


@tool(parallel=True)
def echo():
    async def execute(text: str) -> str:
        """Return the text.

        Args:
            text: Text to return.
        """
        return text

    return execute


@tool(parallel=True)
def nap():
    async def execute(seconds: float) -> str:
        """Sleep, then say so.

        Args:
            seconds: How long to sleep.
        """
        await asyncio.sleep(seconds)
        return "rested"

    return execute


@tool
def explode():
    async def execute() -> str:
        """Fail in a way that is fatal to the sample."""
        raise RuntimeError("kaboom")

    return execute


@tool
def refuse():
    async def execute() -> str:
        """Fail in a way the model sees."""
        raise ToolError("not today")

    return execute
