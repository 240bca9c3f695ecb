"""Token usage accounting: a context-variable chain of ``UsageCounter``s.

The runner of a sample opens a sample-level scope; every nested agent run opens its own scope, so
its usage starts from zero (a child run gets a fresh usage accumulator). Usage recorded in
a scope is also added, *as it happens*, to every enclosing scope as a "child" figure, so a
sample-level token limit sees tokens spent inside a long nested run before that run returns.

A scope opened with ``count_toward_limits=False`` (e.g. a reviewer's model calls) is still
reported, but its tokens are left out of ``limit_tokens`` of every enclosing scope.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from orchestrator.util._token_metering import PROCESS_LIMIT_TOKENS, LimitTokens, bind_limit_tokens

from ._model_output import ModelUsage


class UsageCounter:
    """Usage of one scope (a sample, or one agent run) and of the scopes nested in it."""

    def __init__(self, name: str | None = None, parent: UsageCounter | None = None,
                 count_toward_limits: bool = True, tokens_for_limits: LimitTokens | None = None) -> None:
        self.name = name
        self.parent = parent
        self.count_toward_limits = count_toward_limits
        self.own = ModelUsage()  # calls made directly in this scope
        self.children: dict[str, ModelUsage] = {}  # nested scopes' usage, by scope name
        self.by_model: dict[str, ModelUsage] = {}  # own + nested usage, by model name
        # Counted in util's ``LimitTokens``, which token limits (in util, below this package) read.
        self.tokens_for_limits = tokens_for_limits or LimitTokens()
        self.closed = False

    @property
    def limit_tokens(self) -> int:
        """Own + nested total tokens that count toward limits."""
        return self.tokens_for_limits.count

    @limit_tokens.setter
    def limit_tokens(self, value: int) -> None:
        self.tokens_for_limits.count = value

    @property
    def children_total(self) -> ModelUsage:
        total = ModelUsage()
        for usage in self.children.values():
            total = total + usage
        return total

    @property
    def total(self) -> ModelUsage:
        """Own usage plus every nested scope's."""
        return self.own + self.children_total

    @property
    def total_tokens(self) -> int:
        return self.total.total_tokens

    def _add_own(self, model: str, usage: ModelUsage) -> None:
        self.own = self.own + usage
        self._add_model(model, usage)

    def _add_child(self, child_name: str, model: str, usage: ModelUsage) -> None:
        self.children[child_name] = self.children.get(child_name, ModelUsage()) + usage
        self._add_model(model, usage)

    def _add_model(self, model: str, usage: ModelUsage) -> None:
        self.by_model[model] = self.by_model.get(model, ModelUsage()) + usage

    def __repr__(self) -> str:
        return f"UsageCounter(name={self.name!r}, own={self.own.total_tokens}, total={self.total_tokens})"


# Outside any sample, usage lands on a process-wide root so recording never fails.
_ROOT = UsageCounter(name="process", tokens_for_limits=PROCESS_LIMIT_TOKENS)
_current: ContextVar[UsageCounter] = ContextVar("toolfleet_usage", default=_ROOT)


def current_usage() -> UsageCounter:
    """The innermost usage scope (the process root outside any scope)."""
    return _current.get()


@contextlib.contextmanager
def usage_scope(name: str | None = None, count_toward_limits: bool = True) -> Iterator[UsageCounter]:
    """Push a fresh counter; its usage rolls up into the enclosing scopes' ``children`` figures.

    Roll-up happens at record time rather than on exit so enclosing limits stay accurate while the
    nested run is still going; exit only closes the counter.
    """
    parent: UsageCounter | None = _current.get()
    if parent is _ROOT:
        # A top-level scope (a sample) is detached from the process root, so the root does not
        # keep a child figure per sample for the life of the process.
        parent = None
    counter = UsageCounter(name=name, parent=parent, count_toward_limits=count_toward_limits)
    token = _current.set(counter)
    try:
        with bind_limit_tokens(counter.tokens_for_limits):  # what token limits entered in the scope read
            yield counter
    finally:
        counter.closed = True
        _current.reset(token)


def record_model_usage(model: str, usage: ModelUsage) -> None:
    """Add one model call's usage to the current scope and, as child figures, to its ancestors."""
    counter = _current.get()
    counter._add_own(model, usage)
    counter.limit_tokens += usage.total_tokens
    # An excluded scope counts its own tokens toward its own limits, but not toward any scope
    # above it (nor does anything nested under it).
    excluded = not counter.count_toward_limits
    child, ancestor = counter, counter.parent
    while ancestor is not None:
        ancestor._add_child(child.name or "child", model, usage)
        if not excluded:
            ancestor.limit_tokens += usage.total_tokens
        excluded = excluded or not ancestor.count_toward_limits
        child, ancestor = ancestor, ancestor.parent
