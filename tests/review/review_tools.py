"""Tools and reviewers for the review suite.

A module (not test-local closures) so a Celery worker can rebuild the tools by name: remote
workers import it on demand from the tool's registry reference.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.log import transcript
from orchestrator.review import Review, Reviewer, reviewer
from orchestrator.tool import ToolApprovalError, ToolCall, ToolCallContent, ToolCallView, tool


@tool(parallel=True)
def raise_approval_error():
    async def execute(message: str) -> str:
        """Raise an approval error from inside the tool (it runs; the error reaches the model).

        Args:
            message: The error message.
        """
        raise ToolApprovalError(message)

    return execute


@tool(parallel=True)
def curl():
    async def execute(url: str) -> str:
        """Pretend to fetch a URL and return the response head.

        Args:
            url: The URL.
        """
        return f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody of {url}"

    return execute


def _command_viewer(call: ToolCall) -> ToolCallView:
    return ToolCallView(
        context=ToolCallContent(content=f"working directory: /srv/{call.arguments.get('cwd', 'app')}"),
        call=ToolCallContent(format="markdown", content=f"```bash\n{call.arguments.get('command', '')}\n```"),
    )


@tool(parallel=True, viewer=_command_viewer)
def shell():
    async def execute(command: str, cwd: str = "app") -> str:
        """Pretend to run a shell command and echo it.

        Args:
            command: The command.
            cwd: Working directory name.
        """
        return f"ran: {command}"

    return execute


@tool(parallel=True, runs_on="orchestrator")
def chatty():
    async def execute(n: int) -> str:
        """Emit n info events while running, then return.

        Args:
            n: How many events.
        """
        for i in range(n):
            transcript().info(f"chatty progress {i}", source="chatty")
            await asyncio.sleep(0)
        return f"chatty done {n}"

    return execute


@reviewer(name="scripted_review")
def scripted_review(decision: str = "continue", explanation: str | None = None, seen: list | None = None,
                    when: Any = None) -> Reviewer:
    """Decide every result the same way (``when``: optional predicate on (call, output) → decision applies)."""

    async def review(message, call, result, output, view, history) -> Review:
        if seen is not None:
            seen.append({"message": message, "call": call, "result": result, "output": output, "view": view,
                         "history": list(history)})
        if when is not None and not when(call, output):
            return Review(decision="escalate", explanation="not mine")
        return Review(decision=decision, explanation=explanation)

    return review


@reviewer
def no_network() -> Reviewer:
    """The review design's example: terminate when the output shows the agent reached the network."""

    async def review(message, call, result, output, view, history) -> Review:
        if "HTTP/1.1 200" in str(output):
            return Review(decision="terminate", explanation="The agent reached the network.")
        return Review(decision="continue")

    return review


@reviewer(name="output_monitor")
def output_monitor(flag: str = "SUSPICIOUS") -> Reviewer:
    """Escalate results containing ``flag`` (to a human further down the policy); continue the rest."""

    async def review(message, call, result, output, view, history) -> Review:
        if flag in str(output):
            return Review(decision="escalate", explanation=f"Output contains {flag}.")
        return Review(decision="continue", explanation="Nothing suspicious.")

    return review
