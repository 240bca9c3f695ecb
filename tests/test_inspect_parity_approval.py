"""Approval (modify, rejection by the policy, termination) behaves as Inspect AI 0.3.285's does.

Expectations are what Inspect produced for the same policies (run side by side with inspect-ai).
"""

from __future__ import annotations

import pytest

from orchestrator.approval import Approval, ApprovalPolicy, approval, auto_approver, read_approval_policies
from orchestrator.log import ApprovalEvent, ToolEvent
from orchestrator.tool import ToolCall
from orchestrator.util import TerminateSampleError
from tests.support import sample_tools as st
from tests.support.execution import calls, run_turn

TOOLS = [st.add(), st.noop()]
ADD = calls(("add", {"x": 1, "y": 2}))


def deciding(decision: str, modified: dict | None = None, function: str = "add", explanation: str | None = None):
    async def approve(message, call, view, history):
        changed = ToolCall(id=call.id, function=function, arguments=modified) if modified is not None else None
        return Approval(decision=decision, modified=changed, explanation=explanation)

    return approve


def summary(transcript) -> list[tuple]:
    return [(e.approver, e.decision, e.explanation) if isinstance(e, ApprovalEvent) else ("tool", e.arguments, e.result)
            for e in transcript.events if isinstance(e, (ApprovalEvent, ToolEvent))]


# -- item 9: a modify decision runs the modified call ------------------------------------------------

async def test_modify_runs_the_modified_call(dispatcher) -> None:
    policy = [ApprovalPolicy(deciding("modify", {"x": 40, "y": 2}), "*")]
    result, transcript = await run_turn(dispatcher, ADD, TOOLS, approval=policy)
    assert result.messages[0].text == "42"
    assert transcript.find(ToolEvent)[0].arguments == {"x": 40, "y": 2}
    assert transcript.find(ApprovalEvent)[0].modified.arguments == {"x": 40, "y": 2}


async def test_approve_with_a_modified_call_runs_it_too(dispatcher) -> None:
    policy = [ApprovalPolicy(deciding("approve", {"x": 40, "y": 2}), "*")]
    result, _ = await run_turn(dispatcher, ADD, TOOLS, approval=policy)
    assert result.messages[0].text == "42"


async def test_modify_without_a_call_is_not_run(dispatcher) -> None:
    result, transcript = await run_turn(dispatcher, ADD, TOOLS, approval=[ApprovalPolicy(deciding("modify"), "*")])
    error = result.messages[0].error
    assert (error.type, error.message) == (
        "approval",
        "The approver chose to modify this tool call but supplied no modified call, so the call was not run.")
    assert transcript.find(ToolEvent)[0].result == ""


async def test_modify_to_another_function_fails_the_sample_and_logs_the_call(dispatcher) -> None:
    policy = [ApprovalPolicy(deciding("modify", {}, function="noop"), "*")]
    with pytest.raises(RuntimeError) as err:
        await run_turn(dispatcher, ADD, TOOLS, approval=policy)
    assert str(err.value) == ("An approver returned a modified call to 'noop' for a call to 'add'. A 'modify' decision "
                              "may change only the arguments of a tool call, not the function called.")


async def test_modified_arguments_nested_too_deep_are_a_parsing_error(dispatcher) -> None:
    deep: object = 1
    for _ in range(5000):
        deep = {"k": deep}
    result, _ = await run_turn(dispatcher, ADD, TOOLS, approval=[ApprovalPolicy(deciding("modify", {"x": deep}), "*")])
    assert (result.messages[0].error.type, result.messages[0].error.message) == (
        "parsing", "Error parsing tool call arguments: arguments exceed the maximum supported nesting depth of 100")


# -- item 13 ------------------------------------------------------------------------------------------

async def test_no_matching_approver_records_the_policys_rejection(dispatcher) -> None:
    result, transcript = await run_turn(dispatcher, ADD, TOOLS, approval=[ApprovalPolicy(auto_approver(), "noop")])
    assert result.messages[0].error.message == "No approvers registered for tool add"
    assert summary(transcript) == [
        ("policy", "reject", "No approvers registered for tool add"),
        ("tool", {"x": 1, "y": 2}, ""),
    ]


async def test_every_approver_escalating_names_the_policy(dispatcher) -> None:
    policy = [ApprovalPolicy(deciding("escalate", explanation="unsure"), "*"),
              ApprovalPolicy(deciding("escalate", explanation="unsure"), "add")]
    result, transcript = await run_turn(dispatcher, ADD, TOOLS, approval=policy)
    assert result.messages[0].error.message == "No approval granted for tool add"
    decisions = [(e.approver, e.decision) for e in transcript.find(ApprovalEvent)]
    assert decisions[2:] == [("policy", "reject")] and [d for _, d in decisions[:2]] == ["escalate", "escalate"]


async def test_an_empty_policy_approves(dispatcher) -> None:
    result, transcript = await run_turn(dispatcher, ADD, TOOLS, approval=[])
    assert result.messages[0].text == "3" and result.messages[0].error is None
    assert transcript.find(ApprovalEvent) == []


async def test_termination_without_a_reason_uses_inspects_text(dispatcher) -> None:
    policy = [ApprovalPolicy(deciding("terminate"), "*")]
    with pytest.raises(TerminateSampleError, match=r"^Tool call approver requested termination\.$"):
        await run_turn(dispatcher, ADD, TOOLS, approval=policy)


async def test_a_terminated_call_logs_its_tool_event_after_the_approval(dispatcher) -> None:
    from orchestrator.dispatch import reset_active_dispatcher, set_active_dispatcher
    from orchestrator.log import Transcript, bind_transcript
    from orchestrator.model import execute_tools
    from tests.support.execution import turn

    transcript = Transcript()
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript), pytest.raises(TerminateSampleError):
            await execute_tools(turn(ADD), TOOLS, approval=[ApprovalPolicy(deciding("terminate"), "*")])
    finally:
        reset_active_dispatcher(token)
    kinds = [e.event for e in transcript.events if isinstance(e, (ApprovalEvent, ToolEvent))]
    assert kinds == ["approval", "tool"]
    event = transcript.find(ToolEvent)[0]
    assert (event.function, event.arguments, event.result, event.error) == ("add", {"x": 1, "y": 2}, "", None)


async def test_approval_context_manager_replaces_the_policies(dispatcher) -> None:
    with approval([ApprovalPolicy(deciding("reject", explanation="not now"), "*")]):
        result, _ = await run_turn(dispatcher, ADD, TOOLS)
    assert result.messages[0].error.message == "not now"
    result, _ = await run_turn(dispatcher, ADD, TOOLS)
    assert result.messages[0].text == "3"  # restored on exit (no policy: approve)


def test_read_approval_policies(tmp_path) -> None:
    path = tmp_path / "approval.yaml"
    path.write_text("approvers:\n  - name: auto\n    tools: '*'\n")
    [policy] = read_approval_policies(str(path))
    assert policy.tools == "*"
    with pytest.raises(FileNotFoundError):
        read_approval_policies(str(tmp_path / "missing.yaml"))
