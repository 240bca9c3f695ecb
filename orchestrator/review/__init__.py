"""Tool-result review (mirrors ``inspect_ai``'s reviewer API, seed 002)."""

from ._policy import (
    ReviewPolicy,
    active_review_policy,
    review_call,
    review_policy_from_config,
    review_policy_from_file,
    review_policy_scope,
)
from ._review import Review, ReviewDecision, Reviewer, reviewer

__all__ = [
    "Review",
    "ReviewDecision",
    "ReviewPolicy",
    "Reviewer",
    "active_review_policy",
    "review_call",
    "review_policy_from_config",
    "review_policy_from_file",
    "review_policy_scope",
    "reviewer",
]
