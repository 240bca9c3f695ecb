"""The tool-call engine: ``execute_tools`` runs a turn's tool calls, stage by stage.

Above ``approval``, ``review`` and ``dispatch`` (it asks approvers before a call, reviewers after it, and
the active ``Dispatcher`` to run it), and below ``agent``. Inspect's path, ``orchestrator.model.execute_tools``,
resolves here on first use.

- ``_planner``: split a turn's calls into stages (pure).
- ``_prepare``: before a call: parse errors, lookup, approval, validation, input guardrails.
- ``_finish``: after it: output guardrails, truncation, the ``ToolEvent``, review.
- ``_fatal``: the exception raised for a tool error fatal to the sample.
- ``_execute_tools``: ``execute_tools`` itself: stages, dispatch, cancellation, handoffs.
"""

from ._execute_tools import ExecuteToolsResult, execute_tools

__all__ = ["ExecuteToolsResult", "execute_tools"]
