"""Models, messages and tool-call execution (mirrors ``inspect_ai.model``)."""

from ._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageBase,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from orchestrator.tool._content import (
    ContentDocument,
    ContentImage,
    ContentReasoning,
    ContentText,
    ContentToolUse,
)

from ._call_tools import ExecuteToolsResult, execute_tools
from ._batch import BatchError
from ._generate_config import BatchConfig, GenerateConfig, GenerateConfigArgs
from ._model import (
    Model,
    ModelAPI,
    ModelError,
    active_model,
    get_model,
    init_active_model,
    model_context,
    model_providers,
    modelapi,
)
from ._model_name import ModelName
from ._model_output import ChatCompletionChoice, ModelOutput, ModelUsage, StopReason
from ._providers._retry import RetryPolicy
from ._tool_call_parse import parse_tool_call
from ._usage import UsageCounter, current_usage, record_model_usage, usage_scope

__all__ = [
    "BatchConfig",
    "BatchError",
    "ChatCompletionChoice",
    "ChatMessage",
    "ChatMessageAssistant",
    "ChatMessageBase",
    "ChatMessageSystem",
    "ChatMessageTool",
    "ChatMessageUser",
    "ContentDocument",
    "ContentImage",
    "ContentReasoning",
    "ContentText",
    "ContentToolUse",
    "ExecuteToolsResult",
    "GenerateConfig",
    "GenerateConfigArgs",
    "Model",
    "ModelAPI",
    "ModelError",
    "ModelName",
    "ModelOutput",
    "ModelUsage",
    "RetryPolicy",
    "StopReason",
    "execute_tools",
    "UsageCounter",
    "active_model",
    "current_usage",
    "get_model",
    "init_active_model",
    "model_context",
    "model_providers",
    "modelapi",
    "parse_tool_call",
    "record_model_usage",
    "usage_scope",
]
