"""Built-in approvers: ``auto`` and ``human`` (console)."""

from __future__ import annotations

from orchestrator.model._chat_message import ChatMessage
from orchestrator.tool._tool_call import ToolCall, ToolCallView, render_call

from ._approval import Approval, ApprovalDecision, Approver, approver
from ._console import Choice, ConsolePrompt, render_call_prompt

_APPROVER_CHOICES = {
    "approve": Choice("approve", "approve", frozenset({"yes", "y"})),
    "reject": Choice("reject", "reject", frozenset({"no", "n"})),
    "terminate": Choice("terminate", "terminate"),
    "escalate": Choice("escalate", "escalate"),
    # "always": approve, and remember it for this function for the rest of the run.
    "always": Choice("always", "Always approve", frozenset({"always"})),
}


@approver(name="auto")
def auto_approver(decision: ApprovalDecision = "approve") -> Approver:
    """Decide every call the same way (``approve`` by default)."""

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        return Approval(decision=decision, explanation="Automatic decision.")

    return approve


@approver(name="human")
def human_approver(choices: list[str] | None = None) -> Approver:
    """Ask a person at the console: approve / reject / terminate (``escalate``, ``always`` if given).

    Shows the call and its rendered view. Dismissing the prompt (end of input) terminates. Without
    an interactive terminal it fails at once with ``NoTerminalError``.
    """
    names = choices or ["approve", "reject", "terminate"]
    unknown = [c for c in names if c not in _APPROVER_CHOICES]
    if unknown:
        raise ValueError(f"Unknown human approver choices {unknown} (allowed: {', '.join(_APPROVER_CHOICES)}).")
    prompt = ConsolePrompt([_APPROVER_CHOICES[c] for c in names], kind="approval")

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        text = render_call_prompt(
            "Tool call needs approval", message, render_call(call),
            view.context.content if view.context else None, view.call.content if view.call else None,
        )
        choice, explanation = await prompt.ask(text)
        if choice is None:
            return Approval(decision="terminate", explanation="Approval prompt dismissed by the operator.")
        if choice == "always":
            return Approval(decision="approve", always=True, explanation=explanation
                            or "Approved for the rest of this run.")
        return Approval(decision=choice, explanation=explanation or f"Human operator chose {choice}.")

    return approve
