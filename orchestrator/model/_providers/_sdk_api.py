"""What the two official SDK providers share: their SDKs raise the same error shapes (``APIConnectionError``,
``APIStatusError`` with the response), so retry, ``retry-after`` and the connection ceiling are decided once."""

from __future__ import annotations

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
