"""The egress package's errors: ``EgressError`` is the root (a rule, a network or the DNS filter could
not be set up or removed; the message is one line naming what failed). Docker's and the subprocesses'
errors are translated into it where they are caught."""

from __future__ import annotations

from orchestrator._errors import ToolfleetError

__all__ = ["EgressError"]


class EgressError(ToolfleetError):
    """The host could not enforce or release a sandbox's network policy."""
