"""``bash`` and ``python``: each call a fresh process in the sample's sandbox (parallel-safe)."""

from __future__ import annotations

from orchestrator.tool._tool import Tool, tool
from orchestrator.util._sandbox import sandbox

from ._background import with_background_note
from ._common import format_output, with_timeout_note


@tool(parallel=True)
def bash(timeout: int | None = None, user: str | None = None, background: bool = False) -> Tool:
    """Bash shell command execution tool.

    Args:
      timeout: Seconds after which a command is killed (its whole process group).
      user: User to run commands as (default: the sandbox's user).
      background: Tell the model (in the description) to start long-running commands detached and poll
        them in later calls; what the tool does is unchanged (see ``_background``).
    """

    async def execute(cmd: str) -> str:
        """Use this function to execute bash commands.

        Args:
          cmd: The bash command to execute.

        Returns:
          The output of the command (stderr, then stdout).
        """
        result = await sandbox().exec(["bash", "--login", "-c", cmd], timeout=timeout, user=user)
        return format_output(result)

    if background:
        return with_background_note(execute, timeout)
    return with_timeout_note(execute, timeout)


@tool(parallel=True)
def python(timeout: int | None = None, user: str | None = None) -> Tool:
    """Python code execution tool.

    Args:
      timeout: Seconds after which the program is killed (its whole process group).
      user: User to run the program as (default: the sandbox's user).
    """

    async def execute(code: str) -> str:
        """Use the python function to execute Python code.

        The Python tool executes single-run Python scripts. Important notes:
        1. Each execution is independent - no state is preserved between runs
        2. You must explicitly use print() statements to see any output
        3. Simply writing expressions (like in notebooks) will not display results
        4. The script cannot accept interactive input during execution
        5. Return statements alone won't produce visible output
        6. All variables and imports are cleared between executions
        7. Standard output (via print()) is the only way to see results

        Args:
          code: The python code to execute.

        Returns:
          The output of the Python code (stderr, then stdout).
        """
        # The code travels on stdin, so it needs no quoting and has no argv size limit. The exec
        # agent keeps warm processes for exactly this argv with input (its PYTHON_ARGV): change
        # both together (tests/tools/test_execute.py checks that calls take a spare).
        result = await sandbox().exec(["bash", "--login", "-c", "python3 -"], input=code, timeout=timeout, user=user)
        return format_output(result)

    return with_timeout_note(execute, timeout)
