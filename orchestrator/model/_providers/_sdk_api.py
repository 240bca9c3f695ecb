"""What the two official SDK providers share: their SDKs raise the same error shapes (``APIConnectionError``,
``APIStatusError`` with the response), so retry, ``retry-after`` and the connection ceiling are decided once; and
their async clients are built, bound to an event loop and closed the same way."""

from __future__ import annotations

import asyncio
import os
from types import ModuleType
from typing import Any, ClassVar

from .._model import ModelAPI
from ._client_args import build_client, sdk_client_arg_names, split_client_args
from ._retry import parse_retry_after

DEFAULT_TIMEOUT = 600.0  # seconds per request when GenerateConfig.timeout is unset (the SDKs' default)
LOCAL_API_KEY = "EMPTY"  # placeholder for a self-hosted compatible server that checks no key (vLLM, Ollama)
DEFAULT_MAX_CONNECTIONS = 10  # Inspect's default for API providers; --max-connections overrides it
RETRY_STATUS = frozenset({408, 409, 429})  # and every 5xx


class SdkModelAPI(ModelAPI):
    """A provider on an official SDK module (``openai``, ``anthropic``)."""

    sdk: ClassVar[ModuleType]
    client_class: ClassVar[type]  # the SDK's async client (AsyncOpenAI, AsyncAnthropic)
    _max_connections: int | None = None
    _client: Any = None
    _client_loop: asyncio.AbstractEventLoop | None = None

    def _setup_client(self, client_args: dict[str, Any], max_connections: int | None) -> None:
        """Split ``-M`` arguments into generate settings and client arguments, and build the client now
        (a bad client argument fails before the eval starts); the first loop to use it adopts it."""
        settings, self._client_args = split_client_args(client_args)
        self.config = self.config.merge(settings)
        self._max_connections = max_connections
        self._client = self._new_client()
        self._client_loop = None

    @classmethod
    def client_arg_names(cls) -> frozenset[str]:
        return sdk_client_arg_names(cls.client_class)

    def client(self) -> Any:
        """The SDK client for the running event loop."""
        return self._client_for_loop()

    def _new_client(self) -> Any:
        args = {"timeout": self.config.timeout or DEFAULT_TIMEOUT, **self._client_args}
        return build_client(self.client_class, api_key=self.api_key, base_url=self.base_url, max_retries=0, **args)

    def _client_for_loop(self) -> Any:
        # httpx pools are bound to the loop that opened them: a memoized model used from a new loop
        # (a new eval, a new test) needs a new client.
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is None:
            self._client_loop = loop
        if self._client is None or self._client_loop is not loop:
            self._client = self._new_client()
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client, self._client_loop = None, None

    @staticmethod
    def endpoint(base_url: str | None, api_key: str | None, env_prefix: str, no_key: str,
                 local_key: str) -> tuple[str | None, str]:
        """``base_url`` and ``api_key`` from the arguments, else ``<PREFIX>_BASE_URL`` / ``<PREFIX>_API_KEY``; a
        server named without a key gets ``local_key`` (self-hosted ones check none), neither is ``no_key``'s error."""
        base_url = base_url or os.environ.get(f"{env_prefix}_BASE_URL") or None
        api_key = api_key or os.environ.get(f"{env_prefix}_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise ValueError(no_key)
            api_key = local_key
        return base_url, api_key

    def should_retry(self, ex: BaseException) -> bool:
        if isinstance(ex, self.sdk.APIConnectionError):  # includes APITimeoutError
            return True
        if isinstance(ex, self.sdk.APIStatusError):
            return ex.status_code in RETRY_STATUS or ex.status_code >= 500
        return False

    def retry_after(self, ex: BaseException) -> float | None:
        if isinstance(ex, self.sdk.APIStatusError):
            return parse_retry_after(ex.response.headers)
        return None

    def connection_limit(self) -> int | None:
        return self._max_connections or DEFAULT_MAX_CONNECTIONS
