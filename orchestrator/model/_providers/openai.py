"""``openai/<model>``: any OpenAI-compatible chat-completions server through the official SDK.

``base_url`` / ``api_key`` come from arguments or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. The SDK's
own retries are off (``max_retries=0``): ``Model`` retries, so retries are bounded in time and show
up in the ``ModelEvent``. A context-window overflow answers a ``model_length`` output, not an error.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

import openai
from openai import AsyncOpenAI

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._batch import BatchBackend
from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput
from ._openai_wire import build_request, is_context_length_error, parse_completion
from ._sdk_api import DEFAULT_TIMEOUT, LOCAL_API_KEY, SdkModelAPI


class OpenAIAPI(SdkModelAPI):
    sdk: ClassVar[ModuleType] = openai
    client_class = AsyncOpenAI
    environment = ("OPENAI_BASE_URL", "OPENAI_API_KEY")

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, max_connections: int | None = None,
                 extra_body: dict[str, Any] | None = None, **client_args: Any) -> None:
        base_url, api_key = self.endpoint(base_url, api_key, "OPENAI",
                                          "openai models need an API key: pass api_key= or set OPENAI_API_KEY "
                                          "(or point base_url/OPENAI_BASE_URL at a self-hosted server)",
                                          LOCAL_API_KEY)
        super().__init__(model_name, base_url, api_key, config)
        self._setup_client(client_args, max_connections)
        self._extra_body = extra_body

    @property
    def extra_body(self) -> dict[str, Any] | None:
        return self._extra_body

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

    def batch_backend(self) -> BatchBackend:
        from ._openai_batch import OpenAIBatch

        return OpenAIBatch(self)
