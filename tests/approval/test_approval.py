"""Approval policies, through execute_tools over every dispatcher."""

from __future__ import annotations

import pytest

from orchestrator.approval import (
    Approval,
    ApprovalPolicy,
    approval_policy_scope,
    approver,
    auto_approver,
    fresh_approval_store,
    policy_from_config,
    policy_from_file,
)
from orchestrator.log import ApprovalEvent, ToolEvent
from orchestrator.tool import ToolCall, ToolDef
from orchestrator.util import TerminateSampleError
from tests.support import sample_tools as st
from tests.support.execution import calls, run_turn

TOOLS = [st.add(), st.text_of_size(), st.noop()]


def scripted_approver(decision: str, explanation: str | None = None, modified: dict | None = None,
                      seen: list | None = None, always: bool = False):
    async def decide(message, call, view, history):
        if seen is not None:
            seen.append(call.function)
        mod = ToolCall(id=call.id, function=call.function, arguments=modified) if modified is not None else None
        return Approval(decision=decision, explanation=explanation, modified=mod, always=always)

    return decide


def errs(result):
    return [(m.error.type, m.error.message) if m.error else None for m in result.messages]


async def test_no_matching_approver_rejects(dispatcher) -> None:
    policy = [ApprovalPolicy(auto_approver(), "noop")]
    result, t = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
    assert errs(result) == [("approval", "No approvers registered for tool add")]
    assert t.find(ToolEvent)[0].error.type == "approval"


async def test_all_escalating_rejects(dispatcher) -> None:
    policy = [ApprovalPolicy(scripted_approver("escalate"), "*"), ApprovalPolicy(scripted_approver("escalate"), "add")]
    result, t = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
    assert errs(result) == [("approval", "No approval granted for tool add")]
    # as in Inspect, the policy's own rejection is recorded after the escalations
    assert [(e.approver, e.decision) for e in t.find(ApprovalEvent)][-1] == ("policy", "reject")
    assert [e.decision for e in t.find(ApprovalEvent)] == ["escalate", "escalate", "reject"]


async def test_first_non_escalating_approver_decides_in_order(dispatcher) -> None:
    seen: list = []
    policy = [
        ApprovalPolicy(scripted_approver("escalate", seen=seen), "add"),
        ApprovalPolicy(scripted_approver("approve", seen=seen), "*"),
        ApprovalPolicy(scripted_approver("reject", "never reached", seen=seen), "*"),
    ]
    result, t = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
    assert [m.text for m in result.messages] == ["2"]
    assert len(seen) == 2
    assert [e.decision for e in t.find(ApprovalEvent)] == ["escalate", "approve"]


async def test_reject_with_and_without_explanation(dispatcher) -> None:
    for explanation, message in (("Too risky.", "Too risky."), (None, "Tool call not approved.")):
        policy = [ApprovalPolicy(scripted_approver("reject", explanation), "*")]
        result, _t = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
        assert errs(result) == [("approval", message)]


async def test_argument_globs_select_approvers(dispatcher) -> None:
    policy = [
        ApprovalPolicy(scripted_approver("reject", "no big outputs"), "text_of_size(n='1000*')"),
        ApprovalPolicy(auto_approver(), "*"),
    ]
    result, _ = await run_turn(dispatcher, calls(("text_of_size", {"n": 10000}), ("text_of_size", {"n": 5})), TOOLS,
                               approval=policy)
    assert errs(result) == [("approval", "no big outputs"), None]
    assert result.messages[1].text == "xxxxx"


async def test_modify_replaces_arguments(dispatcher) -> None:
    policy = [ApprovalPolicy(scripted_approver("modify", modified={"x": 40, "y": 2}), "*")]
    result, t = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
    assert result.messages[0].text == "42"
    assert t.find(ToolEvent)[0].arguments == {"x": 40, "y": 2}


async def test_modify_is_validated_after_approval(dispatcher) -> None:
    policy = [ApprovalPolicy(scripted_approver("modify", modified={"x": "bad", "y": 2}), "*")]
    result, _ = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
    assert errs(result)[0][0] == "parsing"


async def test_modify_changing_the_function_is_an_error(dispatcher) -> None:
    async def swap(message, call, view, history):
        return Approval(decision="modify", modified=ToolCall(id=call.id, function="noop", arguments={}))

    with pytest.raises(RuntimeError, match="may change only the arguments"):
        await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=[ApprovalPolicy(swap, "*")])


async def test_terminate_ends_the_sample(dispatcher) -> None:
    policy = [ApprovalPolicy(scripted_approver("terminate", "Operator stop."), "*")]
    with pytest.raises(TerminateSampleError, match=r"Operator stop\."):
        await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)


async def test_active_policy_and_replacement(dispatcher) -> None:
    reject_all = [ApprovalPolicy(scripted_approver("reject", "outer"), "*")]
    with approval_policy_scope(reject_all):
        result, _ = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS)
        assert errs(result) == [("approval", "outer")]
        # an explicit policy replaces the active one for the duration of the call
        result, _ = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS,
                                   approval=[ApprovalPolicy(auto_approver(), "*")])
        assert errs(result) == [None]


async def test_needs_approval_without_policy_is_rejected(dispatcher) -> None:
    guarded = ToolDef(st.add(), needs_approval=lambda args: args["x"] > 10)
    result, _ = await run_turn(dispatcher, calls(("add", {"x": 11, "y": 1}), ("add", {"x": 1, "y": 1})), [guarded])
    assert errs(result) == [("approval", "Tool add needs approval and no approval policy is active."), None]


async def test_always_is_remembered_but_not_in_a_fresh_store(dispatcher) -> None:
    seen: list = []
    policy = [ApprovalPolicy(scripted_approver("approve", seen=seen, always=True), "*")]
    with fresh_approval_store():
        await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
        await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
        assert len(seen) == 1  # second call answered from the store
        with fresh_approval_store():  # a nested run
            await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), TOOLS, approval=policy)
        assert len(seen) == 2


def test_yaml_policy(tmp_path) -> None:
    @approver(name="test_reject_all")
    def reject_all(reason: str = "no"):
        async def decide(message, call, view, history):
            return Approval(decision="reject", explanation=reason)

        return decide

    path = tmp_path / "policy.yaml"
    path.write_text('approvers:\n  - name: test_reject_all\n    tools: ["bash(command=\'rm*\')"]\n    reason: '
                    'dangerous\n'
                    "  - name: auto\n    tools: '*'\n")
    policy = policy_from_file(path)
    assert [p.tools for p in policy] == [["bash(command='rm*')"], "*"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("approvers: [", "is not valid YAML"),
        ("approvers: {}", "needs a list under 'approvers'"),
        ("approvers:\n  - tools: '*'\n", "needs a 'name'"),
        ("approvers:\n  - name: no_such_approver\n", "Unknown approver 'no_such_approver'"),
    ],
)
def test_malformed_yaml_policies(tmp_path, text, message) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        policy_from_file(path)


def test_missing_policy_file() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        policy_from_file("/no/such/policy.yaml")


def test_policy_from_config_builds_builtin_approvers() -> None:
    [entry] = policy_from_config({"approvers": [{"name": "auto", "tools": "bash", "decision": "reject"}]})
    assert entry.tools == "bash"
