"""The internal tool scorers use to run a command in a sample's sandbox.

Scorers run in the orchestrator, but the sandbox lives wherever the sample's calls run (this process in
embedded mode, a worker host in distributed mode). So a sandbox-executed scorer sends its command as an
ordinary tool call through the dispatcher: the same registered-tools-only, JSON-only path as the model's
calls. The tool is never offered to the model (its name starts with ``_``, and no task lists it).
"""

from __future__ import annotations

import json

from orchestrator.tool import tool
from orchestrator.util import sandbox

SCORER_EXEC_TOOL = "_scorer_exec"


@tool(name=SCORER_EXEC_TOOL)
def scorer_exec():  # type: ignore[no-untyped-def]
    async def execute(cmd: list[str], input: str | None = None, files: dict[str, str] | None = None,
                      timeout: float | None = None) -> str:
        """Run a scoring command in the sample's sandbox.

        Args:
            cmd: The command (argv).
            input: Text sent to the command's stdin.
            files: Files (path -> contents) written before the command runs.
            timeout: Seconds before the command's process group is killed.

        Returns:
            JSON with returncode, stdout, stderr and timed_out.
        """
        env = sandbox()
        for path, contents in (files or {}).items():
            await env.write_file(path, contents)
        try:
            result = await env.exec(cmd, input=input, timeout=timeout)
        except TimeoutError as exc:
            # A scorer's test that hangs is a failing test, not an error of the sample.
            return json.dumps({"returncode": 124, "stdout": getattr(exc, "stdout", ""),
                               "stderr": getattr(exc, "stderr", ""), "timed_out": True})
        return json.dumps({"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                           "timed_out": False})

    return execute
