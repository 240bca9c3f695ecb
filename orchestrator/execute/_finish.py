"""After a call: output guardrails, truncation, the ``ToolEvent``, then review.

``complete_call`` records the ``ToolEvent``; ``FinishContext.review_executed`` then reviews, so each
``ReviewEvent`` follows its call's event (and the events the tool emitted while running). Reviewers
see the tool's own return value (untruncated, before output guardrails); the model sees the
truncated message. ``keep_result`` records an executed call whose sample stopped before finishing it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from orchestrator._wire import CallOutcome
from orchestrator.approval._console import current_sample_label
from orchestrator.log._events import ToolEvent
from orchestrator.log._sandbox_events import record_outcome_execs
from orchestrator.log._transcript import transcript
from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant, ChatMessageTool
from orchestrator.model._generate_config import active_generate_config
from orchestrator.model._truncate import effective_limit, truncate_output
from orchestrator.review._pending import run_pending
from orchestrator.review._policy import review_call
from orchestrator.tool._content import ContentImage, ContentText
from orchestrator.tool._guardrails import ToolGuardrailTripwire
from orchestrator.tool._tool_call import ToolCallError

from ._fatal import fatal_exception
from ._prepare import Prepared, tool_view


@dataclass
class FinishContext:
    message: ChatMessageAssistant
    history: list[ChatMessage]
    max_output: int | None
    review: list[Any] | None

    async def review_executed(self, p: Prepared, result: ChatMessageTool, output: Any) -> None:
        """Review an executed call (its ``ToolEvent`` is already recorded) as a cancellable pending review."""
        if not self.review:
            return
        # The sample id an operator sees (the eval's, not the sandbox route's), for cancel_review.
        sample_id = current_sample_label() or (p.request.sample_id if p.request is not None else None)
        await run_pending(p.call, sample_id, review_call(
            self.review, self.message.text, p.call, result, output, tool_view(p.tooldef, p.call), self.history))


def _content(result: Any) -> str | list[Any]:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    if isinstance(result, (ContentText, ContentImage)):
        return [result]
    if isinstance(result, list):
        return [ContentText(text=r) if isinstance(r, str) else r for r in result]
    return str(result)


def _truncate(content: str | list[Any], tool: str, limit: int) -> tuple[str | list[Any], tuple[int, int] | None]:
    if isinstance(content, str):
        cut = truncate_output(content, tool, limit)
        return (cut.text, (cut.original_bytes, cut.limit)) if cut else (content, None)
    truncated: tuple[int, int] | None = None
    parts: list[Any] = []
    for part in content:
        if isinstance(part, ContentText):
            cut = truncate_output(part.text, tool, limit)
            if cut:
                part = ContentText(text=cut.text)
                truncated = (cut.original_bytes, cut.limit)
        parts.append(part)
    return parts, truncated


def _record(p: Prepared, result: Any, error: ToolCallError | None, outcome: CallOutcome | None = None,
            truncated: tuple[int, int] | None = None, failed: bool = False, message_id: str | None = None) -> None:
    started = outcome.started if outcome else None
    completed = outcome.completed if outcome else None
    if outcome is not None:  # the call's sandbox execs, in order, just before its event
        record_outcome_execs(outcome, p.call.id)
    transcript().record(ToolEvent(
        id=p.call.id,
        function=p.call.function,
        arguments=p.call.arguments,
        result=result,
        error=error,
        truncated=truncated,
        started=started,
        completed=completed,
        working_time=(completed - started) if started and completed else None,
        host=outcome.host if outcome else None,
        failed=failed,
        message_id=message_id,
    ))


def finish_unexecuted(p: Prepared) -> ChatMessageTool:
    """A call that ended before execution (parse/lookup/approval/validation, or a guardrail reject)."""
    if p.replacement is not None:
        message = ChatMessageTool(content=p.replacement, tool_call_id=p.call.id, function=p.call.function)
        _record(p, p.replacement, None, message_id=message.id)
        return message
    from orchestrator.tool._classify import classify_exception

    error = classify_exception(p.error, p.call.function)  # type: ignore[arg-type]  # no replacement: so an error
    message = ChatMessageTool(content="", tool_call_id=p.call.id, function=p.call.function, error=error)
    _record(p, "", error, message_id=message.id)
    return message


async def complete_call(p: Prepared, outcome: CallOutcome, ctx: FinishContext) -> ChatMessageTool:
    """Guardrails, truncation and the ``ToolEvent`` for an executed call (raises if fatal); no review."""
    if outcome.fatal is not None:
        _record(p, outcome.fatal.message, None, outcome, failed=True)
        raise fatal_exception(outcome.fatal, p.call.function, outcome.exception) from outcome.exception
    output = outcome.result
    for guardrail in p.tooldef.output_guardrails:
        verdict = guardrail(p.call, output)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict.behavior == "reject":
            output = verdict.message or ""
        elif verdict.behavior == "raise":
            raise ToolGuardrailTripwire(getattr(guardrail, "__name__", "output_guardrail"), verdict.message)
    limit = effective_limit(p.tooldef.max_output, ctx.max_output, active_generate_config().max_tool_output)
    content, truncated = _truncate(_content(output), p.call.function, limit)
    message = ChatMessageTool(content=content, tool_call_id=p.call.id, function=p.call.function, error=outcome.error)
    _record(p, content, outcome.error, outcome, truncated, message_id=message.id)
    return message


def keep_result(p: Prepared, outcome: CallOutcome) -> None:
    """The call executed but the sample stopped before its result was processed: keep it on record."""
    if outcome.fatal is not None:
        _record(p, outcome.fatal.message, None, outcome, failed=True)
    else:
        _record(p, _content(outcome.result), outcome.error, outcome)


def cancelled_event(p: Prepared, cause: BaseException) -> None:
    reason = type(cause).__name__ if not str(cause) else f"{type(cause).__name__}: {cause}"
    _record(p, "", ToolCallError(type="cancelled", message=f"Tool call cancelled before completing ({reason})."))
