"""Tool definition layer (shared by the orchestrator and the workers).

Mirrors ``inspect_ai.tool``: port code by replacing ``inspect_ai`` with ``orchestrator``.
The sandbox tools (``bash``, ``python``, ``text_editor``, ``bash_session``) live in ``_tools`` (as
Inspect keeps them) and are re-exported here lazily: importing the tool layer stays cheap.
"""

from typing import Any

from ._content import Content, ContentDocument, ContentImage, ContentReasoning, ContentText, ContentToolUse
from ._errors import ToolApprovalError, ToolError, ToolParsingError
from ._guardrails import GuardrailResult, ToolGuardrailTripwire
from ._registry import ToolRef, registered_tool_names
from ._tool import Tool, ToolResult, set_tool_description, tool, tool_with
from ._tool_call import ToolCall, ToolCallContent, ToolCallError, ToolCallView, ToolChoice, ToolFunction
from ._tool_def import ToolDef
from ._tool_info import ToolInfo, ToolParam, ToolParams

__all__ = [
    "Content",
    "ContentDocument",
    "ContentImage",
    "ContentReasoning",
    "ContentText",
    "ContentToolUse",
    "GuardrailResult",
    "Tool",
    "ToolApprovalError",
    "ToolCall",
    "ToolCallContent",
    "ToolCallError",
    "ToolCallView",
    "ToolChoice",
    "ToolDef",
    "ToolError",
    "ToolFunction",
    "ToolGuardrailTripwire",
    "ToolInfo",
    "ToolParam",
    "ToolParams",
    "ToolParsingError",
    "ToolRef",
    "ToolResult",
    "bash",
    "bash_session",
    "python",
    "registered_tool_names",
    "set_tool_description",
    "text_editor",
    "tool",
    "tool_with",
]

_SANDBOX_TOOLS = {"bash", "python", "text_editor", "bash_session"}


def __getattr__(name: str) -> Any:
    if name in _SANDBOX_TOOLS:
        from . import _tools

        return getattr(_tools, name)
    raise AttributeError(f"module 'orchestrator.tool' has no attribute {name!r}")
