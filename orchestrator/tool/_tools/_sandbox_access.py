"""Internal tools that let orchestrator-side code (scorers, solvers) reach a sample's sandbox.

Scorers run in the orchestrator, but the sandbox lives wherever the sample's calls run (this process in
embedded mode, a worker host in distributed mode). So a scorer's command or file access travels as an
ordinary tool call through the dispatcher: the same registered-tools-only, JSON-only path as the model's
calls. These tools are never offered to the model (their names start with ``_``; no task lists them).
"""

from __future__ import annotations

import base64
import json
from typing import Literal

from orchestrator.tool import Tool, tool
from orchestrator.util import sandbox

SCORER_EXEC_TOOL = "_scorer_exec"
SANDBOX_FILE_TOOL = "_sandbox_file"
SANDBOX_SNAPSHOT_TOOL = "_sandbox_snapshot"


@tool(name=SCORER_EXEC_TOOL)
def scorer_exec() -> Tool:
    async def execute(cmd: list[str], input: str | None = None, files: dict[str, str] | None = None,
                      timeout: float | None = None, cwd: str | None = None, env: dict[str, str] | None = None,
                      user: str | None = None, service: str | None = None) -> str:
        """Run a command in the sample's sandbox.

        Args:
            cmd: The command (argv).
            input: Text sent to the command's stdin.
            files: Files (path -> contents) written before the command runs.
            timeout: Seconds before the command's process group is killed.
            cwd: Working directory.
            env: Extra environment variables.
            user: User to run as.
            service: Which container of a multi-service sandbox (None: the default one).

        Returns:
            JSON with returncode, stdout, stderr and timed_out.
        """
        box = sandbox(service)
        for path, contents in (files or {}).items():
            await box.write_file(path, contents)
        try:
            result = await box.exec(cmd, input=input, cwd=cwd, env=env, user=user, timeout=timeout)
        except TimeoutError as exc:
            # A test that hangs is a failing test, not an error of the sample: report it as data.
            return json.dumps({"returncode": 124, "stdout": getattr(exc, "stdout", ""),
                               "stderr": getattr(exc, "stderr", ""), "timed_out": True})
        return json.dumps({"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                           "timed_out": False})

    return execute


@tool(name=SANDBOX_FILE_TOOL)
def sandbox_file() -> Tool:
    async def execute(op: Literal["read", "write"], file: str, contents: str | None = None, text: bool = True,
                      service: str | None = None) -> str:
        """Read or write a file in the sample's sandbox.

        Args:
            op: read or write.
            file: The file's path.
            contents: For write: the contents (base64 when text is false).
            text: Whether the contents are text (else base64-encoded bytes).
            service: Which container of a multi-service sandbox (None: the default one).

        Returns:
            For read: the contents (base64 when text is false); for write: an empty string.
        """
        box = sandbox(service)
        if op == "read":
            if text:
                return await box.read_file(file, text=True)
            return base64.b64encode(await box.read_file(file, text=False)).decode("ascii")
        data: str | bytes = contents or ""
        await box.write_file(file, data if text else base64.b64decode(data))
        return ""

    return execute


@tool(name=SANDBOX_SNAPSHOT_TOOL)
def sandbox_snapshot() -> Tool:
    async def execute(keep: bool = False) -> str:
        """Snapshot the sample's sandbox.

        Args:
            keep: Whether the snapshot outlives its eval.

        Returns:
            The snapshot, as JSON.
        """
        snap = await sandbox().snapshot(keep=keep)
        return str(snap.model_dump_json())

    return execute
