"""Errors a tool raises to talk to the model.

ToolError                 message goes back to the model (type ``unknown``)
├── ToolParsingError      the call could not be parsed/validated (type ``parsing``)
└── ToolApprovalError     the call was not approved (type ``approval``)

Any other exception raised by a tool is fatal to the sample.
"""

from __future__ import annotations

from orchestrator._errors import ToolfleetError


class ToolError(ToolfleetError):
    """Raise from a tool to report an error the model should see and can recover from."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolParsingError(ToolError):
    pass


class ToolApprovalError(ToolError):
    pass
