"""Built-in approvers: ``auto`` and ``human`` (console)."""

from __future__ import annotations


from orchestrator.model._chat_message import ChatMessage
from orchestrator.tool._tool_call import ToolCall, ToolCallView, render_call

from ._approval import Approval, ApprovalDecision, Approver, approver
from ._console import ConsolePrompt


@approver(name="auto")
def auto_approver(decision: ApprovalDecision = "approve") -> Approver:
    """Decide every call the same way (``approve`` by default)."""

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        return Approval(decision=decision, explanation="Automatic decision.")

    return approve


@approver(name="human")
def human_approver(choices: list[str] | None = None) -> Approver:
    """Ask a person at the console: approve / reject / terminate (``escalate``, ``always`` if given).

    Dismissing the prompt (end of input) terminates. Without an interactive terminal it fails at once.
    """
    options = choices or ["approve", "reject", "terminate"]
    prompt = ConsolePrompt(options)

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        lines = ["Tool call needs approval", f"  {render_call(call)}"]
        if message:
            lines.append(f"Assistant: {message}")
        if view.context is not None:
            lines.append(view.context.content)
        if view.call is not None:
            lines.append(view.call.content)
        choice, explanation = await prompt.ask("\n".join(lines))
        if choice is None:
            return Approval(decision="terminate", explanation="Approval prompt dismissed.")
        if choice == "always":
            return Approval(decision="approve", always=True, explanation=explanation or "Approved for the rest of this run.")
        return Approval(decision=choice, explanation=explanation or f"Human operator chose {choice}.")  # type: ignore[arg-type]

    return approve
