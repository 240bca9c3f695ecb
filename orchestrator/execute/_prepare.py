"""Steps 1–4 of a call, on the orchestrator: parse errors, lookup, approval, validation (+ input guardrails).

``prepare_call`` returns either a ready-to-dispatch call or the error the model should see.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from orchestrator._ids import new_id
from orchestrator._wire import CallRequest
from orchestrator.approval._policy import decide
from orchestrator.log._events import ToolEvent
from orchestrator.log._transcript import transcript
from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant
from orchestrator.model._tool_call_parse import depth_error_message, exceeds_max_depth
from orchestrator.tool._errors import ToolApprovalError, ToolError, ToolParsingError
from orchestrator.tool._guardrails import GuardrailResult, ToolGuardrailTripwire
from orchestrator.tool._tool_call import ToolCall, ToolCallView
from orchestrator.tool._tool_def import ToolDef
from orchestrator.util._limit_errors import TerminateSampleError

TERMINATED_BY_APPROVER = "Tool call approver requested termination."
MODIFY_WITHOUT_CALL = (
    "The approver chose to modify this tool call but supplied no modified call, so the call was not run."
)

HANDOFF_ATTR = "__toolfleet_handoff__"


@dataclass
class Prepared:
    call: ToolCall  # possibly modified by an approver
    tool: ToolDef | None = None
    request: CallRequest | None = None
    error: ToolError | None = None  # the call ends here with this error (not executed)
    replacement: str | None = None  # an input guardrail rejected the call: this is its result

    @property
    def runnable(self) -> bool:
        return self.error is None and self.replacement is None

    @property
    def tooldef(self) -> ToolDef:
        """The tool of a call that got past lookup (every runnable call has one)."""
        if self.tool is None:
            raise RuntimeError(f"tool call {self.call.id} has no tool: it was not runnable")
        return self.tool

    @property
    def sent(self) -> CallRequest:
        """The request of a runnable call, as dispatched."""
        if self.request is None:
            raise RuntimeError(f"tool call {self.call.id} has no request: it was not runnable")
        return self.request


def record_unexecuted(call: ToolCall) -> None:
    """The ``ToolEvent`` of a call that ends the sample before running (Inspect logs it too)."""
    transcript().record(ToolEvent(id=call.id, function=call.function, arguments=call.arguments, result=""))


def tool_view(tool: ToolDef, call: ToolCall) -> ToolCallView:
    if tool.viewer is not None:
        try:
            view: ToolCallView = tool.viewer(call)
            return view
        except Exception:  # noqa: BLE001, S110 - a broken viewer must not break approval: the plain call
            pass
    return ToolCallView()


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def needs_approval(tool: ToolDef, call: ToolCall) -> bool:
    flag = tool.needs_approval
    if callable(flag):
        return bool(await _maybe_await(flag(call.arguments)))
    return bool(flag)


async def prepare_call(
    call: ToolCall,
    tools: dict[str, ToolDef],
    message: ChatMessageAssistant,
    history: list[ChatMessage],
    approval: list[Any] | None,
    sample_id: str | None,
    sandbox: str | None,
) -> Prepared:
    # 1. parse errors (providers that hand over parsed arguments are depth-checked here too)
    if call.parse_error:
        return Prepared(call, error=ToolParsingError(call.parse_error))
    if exceeds_max_depth(call.arguments):
        return Prepared(call, error=ToolParsingError(depth_error_message()))
    # 2. lookup (disabled tools are hidden, so a call to one is a miss)
    tool = tools.get(call.function)
    if tool is None:
        return Prepared(call, error=ToolParsingError(f"Tool {call.function} not found"))
    # 3. approval: an empty policy list means no approval, as in Inspect
    if approval:
        decision = await decide(approval, message.text, call, tool_view(tool, call), history)
        if decision.decision == "terminate":
            record_unexecuted(call)
            # Inspect's text unless the approver said why (we keep its reason: operators read it).
            raise TerminateSampleError(decision.explanation or TERMINATED_BY_APPROVER)
        if decision.decision == "reject":
            return Prepared(call, tool, error=ToolApprovalError(decision.explanation or "Tool call not approved."))
        if decision.decision == "modify" and decision.modified is None:
            # Nothing approved to run; running the original would contradict the decision.
            return Prepared(call, tool, error=ToolApprovalError(MODIFY_WITHOUT_CALL))
        if decision.modified is not None:  # Inspect runs a supplied modified call for approve too
            if decision.modified.function != call.function:
                record_unexecuted(call)
                raise RuntimeError(
                    f"An approver returned a modified call to '{decision.modified.function}' for a call to "
                    f"'{call.function}'. A 'modify' decision may change only the arguments of a tool call, "
                    "not the function called."
                )
            call = call.model_copy(update={"arguments": decision.modified.arguments})
            if decision.modified.parse_error:  # e.g. the approver's arguments nest too deep
                return Prepared(call, tool, error=ToolParsingError(decision.modified.parse_error))
            if exceeds_max_depth(call.arguments):  # a modified call built without validation
                return Prepared(call, tool, error=ToolParsingError(depth_error_message()))
    elif await needs_approval(tool, call):
        return Prepared(call, tool, error=ToolApprovalError(
            f"Tool {call.function} needs approval and no approval policy is active."))
    # 4. validation
    errors = tool.validation_errors(call.arguments)
    if errors:
        listed = "\n- ".join(errors)
        return Prepared(call, tool, error=ToolParsingError(
            f"Found {len(errors)} validation errors parsing tool input arguments:\n- {listed}"))
    for guardrail in tool.input_guardrails:
        verdict: GuardrailResult = await _maybe_await(guardrail(call, tool))
        if verdict.behavior == "reject":
            return Prepared(call, tool, replacement=verdict.message
                            or f"Tool call {call.function} was rejected by a guardrail.")
        if verdict.behavior == "raise":
            raise ToolGuardrailTripwire(getattr(guardrail, "__name__", "input_guardrail"), verdict.message)

    request = CallRequest(
        call_id=new_id(),
        function=call.function,
        tool=tool.ref,
        arguments=call.arguments,
        sample_id=sample_id,
        sandbox=sandbox,
        timeout=tool.timeout,
        timeout_behavior=tool.timeout_behavior,
        max_result_bytes=16 * 1024 * 1024,
    )
    return Prepared(call, tool, request=request)


def runs_locally(tool: ToolDef) -> bool:
    """Tools that steer the conversation run in the orchestrator even in distributed mode."""
    return tool.runs_on == "orchestrator" or tool.ref is None or hasattr(tool.tool, HANDOFF_ATTR)
