"""Tool-result review (mirrors ``inspect_ai.review``).

A reviewer runs after a tool call executed and before its result reaches the model, and decides
whether the sample may go on: ``continue``, ``terminate`` (an operator limit, like approval's), or
``escalate`` (ask the next matching reviewer). No matching reviewer, or every match escalating,
continues. ``pending_reviews`` / ``cancel_review`` let an operator cancel a call whose review is
pending (the sample stops as an operator limit and the result is kept).
"""

from ._human import human_reviewer
from ._pending import PendingReview, cancel_review, pending_reviews
from ._policy import (
    ReviewPolicy,
    active_review_policy,
    resolve_review,
    review_call,
    review_policy_from_config,
    review_policy_from_file,
    review_policy_scope,
)
from ._review import Review, ReviewDecision, Reviewer, reviewer

__all__ = [
    "PendingReview",
    "Review",
    "ReviewDecision",
    "ReviewPolicy",
    "Reviewer",
    "active_review_policy",
    "cancel_review",
    "human_reviewer",
    "pending_reviews",
    "resolve_review",
    "review_call",
    "review_policy_from_config",
    "review_policy_from_file",
    "review_policy_scope",
    "reviewer",
]
