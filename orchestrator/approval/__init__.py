"""Approval policies (mirrors ``inspect_ai.approval``)."""

from ._approval import Approval, ApprovalDecision, Approver, approver
from ._builtin import auto_approver, human_approver
from ._console import NoTerminalError
from ._policy import (
    ApprovalPolicy,
    approval,
    approval_policy_scope,
    fresh_approval_store,
    policy_from_config,
    policy_from_file,
    read_approval_policies,
    resolve_approval,
)

__all__ = [
    "Approval",
    "ApprovalDecision",
    "ApprovalPolicy",
    "Approver",
    "NoTerminalError",
    "approval",
    "approval_policy_scope",
    "approver",
    "auto_approver",
    "fresh_approval_store",
    "human_approver",
    "policy_from_config",
    "policy_from_file",
    "read_approval_policies",
    "resolve_approval",
]
