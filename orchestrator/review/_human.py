"""``human_reviewer``: show the operator an executed call with its result and ask for a decision.

The interface is the human approver's console prompt, so ``continue`` is shown as "approve"
(either word is accepted). Dismissing the prompt (end of input) terminates the sample.
"""

from __future__ import annotations

from typing import Any

from orchestrator.approval._console import Choice, ConsolePrompt, render_call_prompt
from orchestrator.model._chat_message import ChatMessage, ChatMessageTool
from orchestrator.tool._tool_call import ToolCall, ToolCallView, render_call

from ._review import Review, Reviewer, reviewer

_REVIEW_CHOICES = {
    "continue": Choice("continue", "approve", frozenset({"continue", "c", "yes", "y"})),
    "terminate": Choice("terminate", "terminate"),
    "escalate": Choice("escalate", "escalate"),
}


def _result_text(result: ChatMessageTool, output: Any) -> str:
    text = result.text
    if result.error is not None:
        error = f"[error: {result.error.type}] {result.error.message}"
        return f"{error}\n{text}" if text else error
    if not text:
        return "(empty result)"
    if isinstance(output, str) and output != text:
        # The operator sees what the model will see; say that more exists than is shown.
        text += f"\n[the model sees this truncated version; the full output is {len(output.encode())} bytes]"
    return text


@reviewer(name="human")
def human_reviewer(choices: list[str] | None = None) -> Reviewer:
    """Ask a person at the console to review each result: continue / terminate (+ ``escalate`` if given).

    Shows the call, its rendered view and the result the model would receive. Without an
    interactive terminal it fails at once with ``NoTerminalError`` (which ends the sample with an
    error, like any reviewer exception).
    """
    names = choices or ["continue", "terminate"]
    unknown = [c for c in names if c not in _REVIEW_CHOICES]
    if unknown:
        raise ValueError(f"Unknown human reviewer choices {unknown} (allowed: {', '.join(_REVIEW_CHOICES)}).")
    prompt = ConsolePrompt([_REVIEW_CHOICES[c] for c in names], kind="review")

    async def review(message: str, call: ToolCall, result: ChatMessageTool, output: Any, view: ToolCallView,
                     history: list[ChatMessage]) -> Review:
        text = render_call_prompt(
            "Tool result needs review", message, render_call(call),
            view.context.content if view.context else None, view.call.content if view.call else None,
            result=_result_text(result, output),
        )
        choice, explanation = await prompt.ask(text)
        if choice is None:
            return Review(decision="terminate", explanation="Review prompt dismissed by the operator.")
        return Review(decision=choice, explanation=explanation or f"Human operator chose {choice}.")

    return review
