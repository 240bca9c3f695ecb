"""``openai/<model>``: any OpenAI-compatible chat-completions server through the official SDK.

``base_url`` / ``api_key`` come from arguments or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. The SDK's
own retries are off (``max_retries=0``): ``Model`` retries, so retries are bounded in time and show
up in the ``ModelEvent``. A context-window overflow answers a ``model_length`` output, not an error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
from openai import AsyncOpenAI

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._batch import BatchBackend
from .._model_output import ModelOutput
from ._client_args import build_client, sdk_client_arg_names, split_client_args
from ._openai_wire import build_request, is_context_length_error, parse_completion
from ._sdk_api import SdkModelAPI

DEFAULT_TIMEOUT = 600.0  # seconds per request when GenerateConfig.timeout is unset (the SDK's default)
LOCAL_API_KEY = "EMPTY"  # placeholder for self-hosted servers that check no key (vLLM, Ollama)


class OpenAIAPI(SdkModelAPI):
    sdk = openai
    environment = ("OPENAI_BASE_URL", "OPENAI_API_KEY")

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, max_connections: int | None = None,
                 extra_body: dict[str, Any] | None = None, **client_args: Any) -> None:
        base_url, api_key = self.endpoint(base_url, api_key, "OPENAI",
                                          "openai models need an API key: pass api_key= or set OPENAI_API_KEY "
                                          "(or point base_url/OPENAI_BASE_URL at a self-hosted server)",
                                          LOCAL_API_KEY)
        super().__init__(model_name, base_url, api_key, config)
        settings, self._client_args = split_client_args(client_args)
        self.config = self.config.merge(settings)
        self._max_connections = max_connections
        self._extra_body = extra_body
        # Built now (a bad client argument fails before the eval starts); the first loop to use it adopts it.
        self._client: AsyncOpenAI | None = self._new_client()
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @property
    def extra_body(self) -> dict[str, Any] | None:
        return self._extra_body

    def client(self) -> AsyncOpenAI:
        """The SDK client for the running event loop."""
        return self._client_for_loop()

    def _client_for_loop(self) -> AsyncOpenAI:
        # httpx pools are bound to the loop that opened them; a memoized model used from a new loop
        # (a new eval, a new test) needs a new client.
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is None:
            self._client_loop = loop
        if self._client is None or self._client_loop is not loop:
            self._client = self._new_client()
            self._client_loop = loop
        return self._client

    def _new_client(self) -> AsyncOpenAI:
        args = {"timeout": self.config.timeout or DEFAULT_TIMEOUT, **self._client_args}
        return build_client(AsyncOpenAI, api_key=self.api_key, base_url=self.base_url, max_retries=0, **args)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        request = build_request(self.model_name, input, tools, tool_choice, config)
        if self._extra_body:
            request["extra_body"] = self._extra_body
        try:
            completion = await self._client_for_loop().chat.completions.create(
                **request, timeout=config.timeout or DEFAULT_TIMEOUT)
        except openai.BadRequestError as ex:
            if is_context_length_error(ex.code, ex.message):
                return ModelOutput.from_content(self.model_name, ex.message, stop_reason="model_length")
            raise
        return parse_completion(self.model_name, completion, tools)

    @classmethod
    def client_arg_names(cls) -> frozenset[str]:
        return sdk_client_arg_names(AsyncOpenAI)

    def batch_backend(self) -> BatchBackend:
        from ._openai_batch import OpenAIBatch

        return OpenAIBatch(self)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
