"""Approval policies (mirrors ``inspect_ai.approval``)."""

# ``orchestrator.model`` (execute_tools) imports this package's policy module; loading it first
# makes the import order the same whichever package a user imports first (no import cycle).
import orchestrator.model  # noqa: F401,E402  isort: skip

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
