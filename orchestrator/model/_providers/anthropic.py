"""``anthropic/<model>``: the Anthropic Messages API through the official ``anthropic`` SDK.

``base_url`` / ``api_key`` come from arguments or ``ANTHROPIC_BASE_URL`` (the SDK's form, without
``/v1``) / ``ANTHROPIC_API_KEY``; any model name is passed through. Other ``-M`` arguments go to the
SDK client (see ``_client_args``). The SDK's own retries are off: ``Model`` retries 429 (honouring
``retry-after``), 529 overloaded, other 5xx, 408/409 and connection errors. A prompt over the context
window answers a ``model_length`` output, not an error.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any, ClassVar

import anthropic
from anthropic import AsyncAnthropic

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._batch import BatchBackend
from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput
from ._anthropic_wire import build_request, is_context_length_error, parse_message
from ._sdk_api import DEFAULT_TIMEOUT, LOCAL_API_KEY, SdkModelAPI

_OVERLOAD_STATUS = {429, 529}


class AnthropicAPI(SdkModelAPI):
    sdk: ClassVar[ModuleType] = anthropic
    client_class = AsyncAnthropic
    environment = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, max_connections: int | None = None,
                 **client_args: Any) -> None:
        base_url, api_key = self.endpoint(base_url, api_key, "ANTHROPIC",
                                          "anthropic models need an API key: pass api_key= or set ANTHROPIC_API_KEY "
                                          "(or point base_url/ANTHROPIC_BASE_URL at a compatible server)",
                                          LOCAL_API_KEY)
        super().__init__(model_name, base_url, api_key, config)
        self._setup_client(client_args, max_connections)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        request = _sdk_arguments(build_request(self.model_name, input, tools, tool_choice, config))
        try:
            client = self._client_for_loop()
            message = await client.messages.create(**request, timeout=config.timeout or DEFAULT_TIMEOUT)
        except anthropic.BadRequestError as ex:
            if is_context_length_error(ex.message):
                return ModelOutput.from_content(self.model_name, ex.message, stop_reason="model_length")
            raise
        return parse_message(self.model_name, message, tools)

    def is_overload(self, ex: BaseException) -> bool:
        if isinstance(ex, anthropic.APIStatusError):
            return ex.status_code in _OVERLOAD_STATUS
        return False

    def batch_backend(self) -> BatchBackend:
        from ._anthropic_batch import AnthropicBatch

        return AnthropicBatch(self)


@functools.cache
def _create_parameters() -> frozenset[str]:
    from anthropic.resources.messages import AsyncMessages

    return frozenset(inspect.signature(AsyncMessages.create).parameters)


def _sdk_arguments(request: dict[str, Any]) -> dict[str, Any]:
    """The wire body as ``messages.create`` arguments: fields this SDK version has no parameter for
    (some releases dropped ``temperature``/``top_p`` from the signature) travel in ``extra_body``."""
    known = _create_parameters()
    extra = {k: v for k, v in request.items() if k not in known}
    arguments = {k: v for k, v in request.items() if k in known}
    if extra:
        arguments["extra_body"] = extra
    return arguments
