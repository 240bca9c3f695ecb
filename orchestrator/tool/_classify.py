"""Map an exception raised by a tool to what the model sees (pure; table-tested).

``None`` means the exception is fatal to the sample.
"""

from __future__ import annotations

from orchestrator.tool._errors import ToolApprovalError, ToolError, ToolParsingError
from orchestrator.tool._tool_call import ToolCallError
from orchestrator.util._limit_errors import LimitExceededError
from orchestrator.util._sandbox import OutputLimitExceededError, SandboxUnavailableError

TIMEOUT_MESSAGE = "Command timed out before completing."


def _os_error_text(exc: OSError) -> str:
    """Inspect's wording: the reason (``strerror``, else the message), then the file if there is one."""
    text = f"{exc.strerror or str(exc)}."
    return f"{text} Filename '{exc.filename}'." if isinstance(exc.filename, str) else text


def classify_exception(exc: BaseException, function: str) -> ToolCallError | None:
    match exc:
        case TimeoutError():
            return ToolCallError(type="timeout", message=TIMEOUT_MESSAGE)
        case UnicodeDecodeError():
            return ToolCallError(type="unicode_decode", message=f"Error decoding bytes to {exc.encoding}: {exc.reason}")
        case ValueError() if "embedded null byte" in str(exc):
            return ToolCallError(type="parsing",
                                 message=f"An argument to tool '{function}' contained an embedded null byte.")
        case PermissionError():
            return ToolCallError(type="permission", message=_os_error_text(exc))
        case FileNotFoundError():
            if isinstance(exc.filename, str):
                return ToolCallError(type="file_not_found", message=f"File '{exc.filename}' was not found.")
            return ToolCallError(type="file_not_found", message=exc.strerror or str(exc))
        case IsADirectoryError():
            return ToolCallError(type="is_a_directory", message=_os_error_text(exc))
        case OutputLimitExceededError():
            return ToolCallError(type="limit", message=f"The tool exceeded its output limit of {exc.limit_str}.")
        case LimitExceededError():
            return ToolCallError(type="limit", message=f"The tool exceeded its {exc.type} limit of {exc.limit_str}.")
        case SandboxUnavailableError():
            return ToolCallError(type="sandbox_unavailable", message=str(exc))
        case ToolParsingError():
            return ToolCallError(type="parsing", message=exc.message)
        case ToolApprovalError():
            return ToolCallError(type="approval", message=exc.message or "Tool call not approved.")
        case ToolError():
            return ToolCallError(type="unknown", message=exc.message)
    return None
