"""What the two official SDK providers share: their SDKs raise the same error shapes (``APIConnectionError``,
``APIStatusError`` with the response), so retry, ``retry-after`` and the connection ceiling are decided once."""

from __future__ import annotations

import os
from types import ModuleType
from typing import ClassVar

from .._model import ModelAPI
from ._retry import parse_retry_after

DEFAULT_MAX_CONNECTIONS = 10  # Inspect's default for API providers; --max-connections overrides it
RETRY_STATUS = frozenset({408, 409, 429})  # and every 5xx


class SdkModelAPI(ModelAPI):
    """A provider on an official SDK module (``openai``, ``anthropic``)."""

    sdk: ClassVar[ModuleType]
    _max_connections: int | None = None

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
