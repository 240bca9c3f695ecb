"""``bash_session``: a stateful interactive bash on a PTY inside the sandbox, one per ``instance``.

The PTYs are held by a small daemon in the sandbox (``_session_server.py``, copied in on first use);
each action is one short exec of its client. Serial: keystrokes must arrive in declared order.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

from orchestrator.tool._errors import ToolError
from orchestrator.tool._tool import Tool, tool
from orchestrator.util._sandbox import sandbox
from orchestrator.util._timers import arm

from ._common import tool_state, with_timeout_note

_SERVER_SOURCE = (Path(__file__).parent / "_session_server.py").read_text()
_INSTALL = 'mkdir -p "$HOME/.toolfleet" && cat > "$HOME/.toolfleet/session.py"'
_CALL = 'exec python3 -I "$HOME/.toolfleet/session.py" call'
_MISSING = 2  # python3's exit code when the script file is missing
_EXEC_SLACK = 15.0  # bound on one action beyond wait_for_output (server start, python startup)


@tool
def bash_session(timeout: int | None = None, wait_for_output: int = 30, instance: str | None = None) -> Tool:
    """Interactive bash shell session tool.

    Args:
      timeout: Seconds after which an action is abandoned.
      wait_for_output: Longest wait for output after an action (it returns sooner once output is idle ~0.5 s).
      instance: Name of an independent session (default: one shared session).
    """

    async def execute(
        action: Literal["type", "type_submit", "read", "interrupt", "restart"],
        input: str | None = None,
    ) -> str:
        """Interact with a bash shell that keeps its state (cwd, variables, running programs) between calls.

        Interact by sending keystrokes and reading output:
        - `type_submit`: type `input` followed by Enter (runs a command or answers a prompt).
        - `type`: type `input` without pressing Enter.
        - `read`: return output produced since the last action (e.g. from a long-running command).
        - `interrupt`: send Ctrl-C to the running program.
        - `restart`: kill the shell and everything it started, and start a fresh one.
        Each action returns the output that appeared once it has been idle for about half a second.

        Args:
          action: The action to perform: `type`, `type_submit`, `read`, `interrupt` or `restart`.
          input: The text to type (required for `type` and `type_submit`).

        Returns:
          The output that appeared after the action.
        """
        if action in ("type", "type_submit") and input is None:
            raise ToolError(f"`input` is required for the `{action}` action.")
        request: dict[str, object] = {"action": action, "input": input, "instance": instance,
                                      "wait_for_output": wait_for_output}
        async with asyncio.timeout(None) as scope:
            arm(scope, timeout)
            return await _call(request, float(wait_for_output))

    return with_timeout_note(execute, timeout)


async def _call(request: dict[str, object], wait: float) -> str:
    env = sandbox()
    state = tool_state(env, "bash_session")
    for _attempt in range(2):
        if not state.get("installed"):
            installed = await env.exec(["sh", "-c", _INSTALL], input=_SERVER_SOURCE, timeout=_EXEC_SLACK)
            if not installed.success:
                raise ToolError(f"Could not set up the bash session: {installed.stderr.strip()}")
            state["installed"] = True
        result = await env.exec(["sh", "-c", _CALL], input=json.dumps(request), timeout=wait + _EXEC_SLACK)
        if result.returncode == _MISSING and "session.py" in result.stderr:
            state["installed"] = False  # the file went away (e.g. the home dir was wiped): reinstall
            continue
        if result.returncode == 127:
            raise ToolError("bash_session needs python3 in the sandbox image.")
        try:
            response = json.loads(result.stdout)
        except ValueError:
            raise ToolError(f"bash_session failed: {(result.stderr or result.stdout).strip()[:2000]}") from None
        if "error" in response:
            raise ToolError(f"bash_session failed: {response['error']}")
        return str(response["output"])
    raise ToolError("bash_session could not install its helper in the sandbox.")
