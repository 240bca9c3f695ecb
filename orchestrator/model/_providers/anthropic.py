"""``anthropic/<model>``: the Anthropic Messages API through the official ``anthropic`` SDK.

``base_url`` / ``api_key`` come from arguments or ``ANTHROPIC_BASE_URL`` (the SDK's form, without
``/v1``) / ``ANTHROPIC_API_KEY``; any model name is passed through. Other ``-M`` arguments go to the
SDK client (see ``_client_args``). The SDK's own retries are off: ``Model`` retries 429 (honouring
``retry-after``), 529 overloaded, other 5xx, 408/409 and connection errors. A prompt over the context
window answers a ``model_length`` output, not an error.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._batch import BatchBackend
from .._model_output import ModelOutput
from ._anthropic_wire import build_request, is_context_length_error, parse_message
from ._client_args import build_client, sdk_client_arg_names, split_client_args
from ._sdk_api import SdkModelAPI

DEFAULT_TIMEOUT = 600.0  # seconds per request when GenerateConfig.timeout is unset
LOCAL_API_KEY = "EMPTY"  # placeholder for a self-hosted compatible server that checks no key
_OVERLOAD_STATUS = {429, 529}


class AnthropicAPI(SdkModelAPI):
    sdk = anthropic
    environment = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, max_connections: int | None = None,
                 **client_args: Any) -> None:
        base_url, api_key = self.endpoint(base_url, api_key, "ANTHROPIC",
                                          "anthropic models need an API key: pass api_key= or set ANTHROPIC_API_KEY "
                                          "(or point base_url/ANTHROPIC_BASE_URL at a compatible server)",
                                          LOCAL_API_KEY)
        super().__init__(model_name, base_url, api_key, config)
        settings, self._client_args = split_client_args(client_args)
        self.config = self.config.merge(settings)
        self._max_connections = max_connections
        # Built now (a bad client argument fails before the eval starts); the first loop to use it adopts it.
        self._client: AsyncAnthropic | None = self._new_client()
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def client_arg_names(cls) -> frozenset[str]:
        return sdk_client_arg_names(AsyncAnthropic)

    def client(self) -> AsyncAnthropic:
        """The SDK client for the running event loop."""
        return self._client_for_loop()

    def _new_client(self) -> AsyncAnthropic:
        args = {"timeout": self.config.timeout or DEFAULT_TIMEOUT, **self._client_args}
        return build_client(AsyncAnthropic, api_key=self.api_key, base_url=self.base_url, max_retries=0, **args)

    def _client_for_loop(self) -> AsyncAnthropic:
        # httpx pools are bound to the loop that opened them: a new loop needs a new client.
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is None:
            self._client_loop = loop
        if self._client is None or self._client_loop is not loop:
            self._client = self._new_client()
            self._client_loop = loop
        return self._client

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        request = _sdk_arguments(build_request(self.model_name, input, tools, tool_choice, config))
        try:
            message = await self._client_for_loop().messages.create(**request, timeout=config.timeout or DEFAULT_TIMEOUT)
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

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client, self._client_loop = None, None


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
