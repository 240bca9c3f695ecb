"""Tools of a "user package" for tests/distributed/test_task_code.py: the orchestrator imports this module,
and a worker registers its tools only when started with ``--import tests.support.task_code_tools``."""

from __future__ import annotations

import os

from orchestrator.tool import tool


@tool(parallel=True)
def grade():
    async def execute(answer: str) -> str:
        """Grade an answer (says which worker host graded it).

        Args:
            answer: The answer to grade.
        """
        return f"graded {answer} on {os.environ.get('TOOLFLEET_HOST', 'this process')}"

    return execute


@tool(parallel=True)
def lint():
    async def execute(code: str) -> str:
        """Lint some code.

        Args:
            code: The code.
        """
        return f"{len(code)} chars, no findings"

    return execute


@tool(runs_on="orchestrator")
def take_note():
    async def execute(note: str) -> str:
        """Keep a note in the orchestrator.

        Args:
            note: The note.
        """
        return f"noted: {note}"

    return execute
