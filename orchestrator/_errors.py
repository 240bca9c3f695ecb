"""toolfleet's exception roots: every failure toolfleet raises is a ``ToolfleetError``; what it raises to
unwind (a limit reached, a sample ended by an operator, an internal hand-back) is a ``ControlFlowSignal``.

Both halves import this module (it sits in the lowest layer, beside ``orchestrator._ids``), so the
classes stay next to the code that raises them and every layer still points down.
"""

from __future__ import annotations

__all__ = ["ControlFlowSignal", "SetupError", "ToolfleetError"]


class ToolfleetError(Exception):
    """Root of every failure toolfleet raises; the message is a sentence for the user."""


class SetupError(ToolfleetError, ValueError):
    """Something the user fixes before anything runs: a command-line flag, a task or policy file, a broker or
    Docker daemon that does not answer, a prerequisite ``toolfleet setup`` cannot install, a sample's setup
    script that fails. The CLI prints its message as one line (no traceback) and exits 1."""


class ControlFlowSignal(Exception):
    """Root of the exceptions raised to unwind, not to report a failure: whoever catches one turns it into
    an outcome (a limit, a stopped eval, a hand-back). An ``Exception`` still, as Inspect's are, so code
    ported from Inspect catches them where it did."""
