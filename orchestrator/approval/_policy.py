"""Approval policies: ordered (approver, tool globs) pairs, and how a call is decided.

The first matching approver that does not escalate decides. No matching approver → reject
(``No approvers registered for tool X``); every match escalated → reject (``No approval granted
for tool X``). Each decision is recorded as an ``ApprovalEvent`` (the policy's own rejection under
the approver name ``policy``, as Inspect records it). An empty policy approves everything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator._glob import validate_pattern
from orchestrator._policy_chain import entries_from_config, first_decision, load_policy_file
from orchestrator.log._events import ApprovalEvent
from orchestrator.log._transcript import transcript
from orchestrator.model._chat_message import ChatMessage
from orchestrator.tool._tool_call import ToolCall, ToolCallView

from ._approval import Approval, Approver, approver_factory, approver_name


@dataclass
class ApprovalPolicy:
    approver: Approver
    tools: str | list[str] = "*"

    def __post_init__(self) -> None:
        for pattern in [self.tools] if isinstance(self.tools, str) else self.tools:
            validate_pattern(pattern)


@dataclass
class ApprovalStore:
    """Decisions an approver asked to remember (``always=True``) for the rest of one run."""

    decisions: dict[str, Approval] = field(default_factory=dict)


_policy: ContextVar[list[ApprovalPolicy] | None] = ContextVar("toolfleet_approval_policy", default=None)
_store: ContextVar[ApprovalStore | None] = ContextVar("toolfleet_approval_store", default=None)


def active_approval_policy() -> list[ApprovalPolicy] | None:
    return _policy.get()


@contextlib.contextmanager
def approval_policy_scope(policy: list[ApprovalPolicy] | None) -> Iterator[None]:
    """Replace the active policy while the block runs (agent level replaces eval/task level)."""
    token = _policy.set(policy)
    try:
        yield
    finally:
        _policy.reset(token)


@contextlib.contextmanager
def fresh_approval_store() -> Iterator[ApprovalStore]:
    """A nested run starts with an empty store: the parent's 'always' decisions never leak in."""
    store = ApprovalStore()
    token = _store.set(store)
    try:
        yield store
    finally:
        _store.reset(token)


def _current_store() -> ApprovalStore:
    store = _store.get()
    if store is None:
        store = ApprovalStore()
        _store.set(store)
    return store


async def decide(
    policy: Sequence[ApprovalPolicy],
    message: str,
    call: ToolCall,
    view: ToolCallView,
    history: list[ChatMessage],
) -> Approval:
    """Run the policy for one call, recording an ``ApprovalEvent`` per decision."""
    store = _current_store()
    remembered = store.decisions.get(call.function)
    if remembered is not None:
        transcript().record(ApprovalEvent(call=call, approver="store", decision=remembered.decision,
                                          explanation=remembered.explanation))
        return remembered

    async def ask(entry: ApprovalPolicy) -> Approval:
        approval = await entry.approver(message, call, view, history)
        transcript().record(ApprovalEvent(call=call, approver=approver_name(entry.approver), decision=approval.decision,
                                          modified=approval.modified, explanation=approval.explanation))
        return approval

    decided = await first_decision(policy, call, ask, lambda a: a.decision == "escalate")
    approval, matched = decided  # in two steps: mypy solves the call's type from an unpacking target wrongly
    if approval is not None:
        if approval.always and approval.decision in ("approve", "reject"):
            store.decisions[call.function] = approval
        return approval
    # The policy itself decided: record it as Inspect does (approver "policy").
    reason = "approval granted" if matched else "approvers registered"
    rejection = Approval(decision="reject", explanation=f"No {reason} for tool {call.function}")
    transcript().record(ApprovalEvent(call=call, approver="policy", decision="reject",
                                      explanation=rejection.explanation))
    return rejection


def policy_from_config(config: dict[str, Any] | list[dict[str, Any]]) -> list[ApprovalPolicy]:
    """Build a policy from ``{"approvers": [{"name": ..., "tools": ..., **params}]}``."""
    return entries_from_config(config, "approvers", "approval", approver_factory, ApprovalPolicy)


def policy_from_file(path: str | Path) -> list[ApprovalPolicy]:
    return load_policy_file(path, "approval", policy_from_config)


def read_approval_policies(file: str | Path) -> list[ApprovalPolicy]:
    """Inspect's name for reading a YAML/JSON policy file (a missing file is ``FileNotFoundError``)."""
    if not Path(file).exists():
        raise FileNotFoundError(f"Approval policy file not found: {file}")
    return policy_from_file(file)


@contextlib.contextmanager
def approval(policies: list[ApprovalPolicy]) -> Iterator[None]:
    """Inspect's context manager replacing the approval policies while the block runs."""
    with approval_policy_scope(policies):
        yield


def resolve_approval(spec: str | Path | list[ApprovalPolicy] | None) -> list[ApprovalPolicy] | None:
    """``"human"``, ``"auto"``, a YAML path, or a policy list."""
    if spec is None or isinstance(spec, list):
        return spec
    if str(spec) in ("human", "auto"):
        return [ApprovalPolicy(approver=approver_factory(str(spec))(), tools="*")]
    return policy_from_file(spec)
