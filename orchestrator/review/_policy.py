"""Review policies: ordered (reviewer, tool globs); no match → continue; all escalate → continue.

Each reviewer decision is a ``ReviewEvent``; when every matching reviewer escalated, a final
``ReviewEvent`` (no reviewer, ``continue``) records that the result went through unreviewed. A
reviewer runs in its own span and in a usage scope that does not count toward the sample's limits
(its model calls are reported, not charged). Its exceptions propagate: they end the sample with an
error, as an approver's do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator._glob import validate_pattern
from orchestrator._policy_chain import entries_from_config, first_decision, load_policy_file
from orchestrator.log._events import ReviewEvent
from orchestrator.log._transcript import span, transcript
from orchestrator.model._chat_message import ChatMessage, ChatMessageTool
from orchestrator.model._usage import usage_scope
from orchestrator.tool._tool_call import ToolCall, ToolCallView
from orchestrator.util._limit_errors import TerminateSampleError

from ._review import Review, Reviewer, reviewer_factory, reviewer_name


@dataclass
class ReviewPolicy:
    reviewer: Reviewer
    tools: str | list[str] = "*"

    def __post_init__(self) -> None:
        for pattern in [self.tools] if isinstance(self.tools, str) else self.tools:
            validate_pattern(pattern)


_policy: ContextVar[list[ReviewPolicy] | None] = ContextVar("toolfleet_review_policy", default=None)


def active_review_policy() -> list[ReviewPolicy] | None:
    return _policy.get()


@contextlib.contextmanager
def review_policy_scope(policy: list[ReviewPolicy] | None) -> Iterator[None]:
    """Replace the active review policy while the block runs, restoring it after."""
    token = _policy.set(policy)
    try:
        yield
    finally:
        _policy.reset(token)


async def review_call(
    policy: Sequence[ReviewPolicy],
    message: str,
    call: ToolCall,
    result: ChatMessageTool,
    output: Any,
    view: ToolCallView,
    history: list[ChatMessage],
) -> Review:
    """Run the policy for one executed call; ``terminate`` raises ``TerminateSampleError``."""

    async def ask(entry: ReviewPolicy) -> Review:
        name = reviewer_name(entry.reviewer)
        with span(name, type="review"), _uncharged(name):
            review = await entry.reviewer(message, call, result, output, view, history)
        if not isinstance(review, Review):
            raise TypeError(f"Reviewer '{name}' returned {type(review).__name__}, not a Review.")
        transcript().record(ReviewEvent(call=call, reviewer=name, decision=review.decision,
                                        explanation=review.explanation))
        return review

    decided = await first_decision(policy, call, ask, lambda r: r.decision == "escalate")
    review, matched = decided  # in two steps: mypy solves the call's type from an unpacking target wrongly
    if review is None:
        if not matched:
            return Review(decision="continue", explanation="No reviewer matched.")
        # An escalation nobody picked up continues; record the outcome, not just the escalations.
        review = Review(decision="continue", explanation="All reviewers escalated.")
        transcript().record(ReviewEvent(call=call, reviewer=None, decision="continue", explanation=review.explanation))
    if review.decision == "terminate":
        raise TerminateSampleError(review.explanation or f"Review of {call.function} terminated the sample.")
    return review


@contextlib.contextmanager
def _uncharged(name: str) -> Iterator[None]:
    """Run a reviewer so its own model calls are not charged to the sample.

    Its tokens go to a usage scope excluded from every enclosing limit (still reported as a child
    figure), and the sample's message/turn/token limits are hidden from it, so a reviewer that runs
    an agent loop neither spends the sample's turns nor trips its limits. Time and working limits
    stay: the sample's clock keeps running while a reviewer thinks.
    """
    from orchestrator.util import _limits  # the active-limits stack lives there

    kept = tuple(lim for lim in _limits.active_limits() if isinstance(lim, (_limits.TimeLimit, _limits.WorkingLimit)))
    token = _limits._active.set(kept)
    try:
        with usage_scope(f"reviewer:{name}", count_toward_limits=False):
            yield
    finally:
        _limits._active.reset(token)


def review_policy_from_config(config: dict[str, Any] | list[dict[str, Any]]) -> list[ReviewPolicy]:
    """Build a policy from ``{"reviewers": [{"name": ..., "tools": ..., **params}]}``."""
    return entries_from_config(config, "reviewers", "review", reviewer_factory, ReviewPolicy)


def review_policy_from_file(path: str | Path) -> list[ReviewPolicy]:
    return load_policy_file(path, "review", review_policy_from_config)


def resolve_review(spec: str | Path | list[ReviewPolicy] | None) -> list[ReviewPolicy] | None:
    """``"human"``, a registered reviewer name, a YAML path, or a policy list (``--review`` / ``review=``)."""
    if spec is None or isinstance(spec, list):
        return spec
    text = str(spec)
    if not text.endswith((".yaml", ".yml")) and not Path(text).exists():
        # A bare name: a registered reviewer covering every tool ("human" -> human_reviewer()).
        return [ReviewPolicy(reviewer=reviewer_factory(text)(), tools="*")]
    return review_policy_from_file(spec)
