"""Model API retries as they happen: each failed request the provider will retry (a 429, a 5xx, a
dropped connection) is recorded as an ``info`` event (``source="model_retry"``) in the running sample's
transcript, inside the model call's span, before the back-off sleep. The live display counts them at once
(a sample stuck in a 50 s loop of 500s shows it), and the log keeps them as events.

Done by wrapping the eval model's provider: the wrapper passes every call through and only watches the
failures the provider itself judges retryable. The ``ModelEvent`` that ends the call still carries its
``retries`` count; the display does not count those twice (see ``EvalProgress``).
"""

from __future__ import annotations

from typing import Any

from orchestrator.log import InfoEvent, transcript
from orchestrator.model._model import Model, ModelAPI

RETRY_SOURCE = "model_retry"


class _RetryReportingAPI(ModelAPI):
    def __init__(self, inner: ModelAPI) -> None:
        super().__init__(inner.model_name, inner.base_url, inner.api_key, inner.config)
        self.provider = inner.provider
        self.inner = inner

    async def generate(self, input: Any, tools: Any, tool_choice: Any, config: Any) -> Any:
        try:
            return await self.inner.generate(input, tools, tool_choice, config)
        except Exception as ex:
            if self.inner.should_retry(ex):
                status = getattr(ex, "status_code", None)
                transcript().record(InfoEvent(source=RETRY_SOURCE, data={
                    "model": f"{self.provider}/{self.model_name}", "status": status,
                    "rate_limited": status == 429, "error": f"{type(ex).__name__}: {ex}"[:500]}))
            raise

    def should_retry(self, ex: BaseException) -> bool:
        return self.inner.should_retry(ex)

    def retry_after(self, ex: BaseException) -> float | None:
        return self.inner.retry_after(ex)

    def is_overload(self, ex: BaseException) -> bool:
        return self.inner.is_overload(ex)

    def connection_limit(self) -> int | None:
        return self.inner.connection_limit()

    def batch_backend(self) -> Any:
        return self.inner.batch_backend()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # provider-specific attributes (e.g. the scripted model's calls)
        return getattr(self.inner, name)


def reporting_retries(model: Model) -> Model:
    """``model`` whose retryable failures are recorded as they happen (same config, connection budget)."""
    if isinstance(model.api, _RetryReportingAPI):
        return model
    reporting = Model(_RetryReportingAPI(model.api), model.config, model.retry, model.prices)
    reporting._slots = model._slots
    return reporting
