"""``Model``, the ``ModelAPI`` provider seam, the provider registry and ``get_model``.

A ``ModelAPI`` does one thing: turn messages + tool specs into a ``ModelOutput`` (one request, no
retries). ``Model`` wraps it with what every provider needs: config merging, bounded retries with
backoff, a model span + ``ModelEvent`` in the transcript, and usage accounting.

Errors: ``ModelError`` is the root of what ``Model.generate`` raises; provider exceptions are
chained onto it (``raise ModelError(...) from exc``) once retries are exhausted or not allowed.
A context-window overflow is not an error: providers return an output with ``model_length``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar, Token
from typing import Any, ClassVar, TypeVar

from orchestrator._errors import ToolfleetError
from orchestrator.log import InfoEvent, ModelEvent, span, transcript
from orchestrator.tool._tool_call import ToolChoice, ToolFunction
from orchestrator.tool._tool_def import ToolDef, tool_def
from orchestrator.tool._tool_info import ToolInfo
from orchestrator.util._limits import check_message_limit, check_token_limit, record_token_usage, record_turn
from orchestrator.util._retry import Backoff
from orchestrator.util._timers import arm
from orchestrator.util._working import report_wait_since, sample_waiting

from ._batch import BatchBackend, BatchError, batch_pool
from ._chat_message import ChatMessage, ChatMessageUser
from ._concurrency import ConnectionLimiter, LimitChange, Outcome
from ._generate_config import GenerateConfig, active_generate_config
from ._model_output import ModelOutput
from ._pricing import PriceTable, price_table
from ._providers._retry import RetryPolicy
from ._usage import record_model_usage

CONNECTIONS_SOURCE = "model_connections"  # InfoEvent source: the adaptive connection limit changed
MODEL_ENV = "TOOLFLEET_MODEL"  # fallback for get_model() when no model is active
# Per-attempt bound when GenerateConfig.timeout is unset; above the openai SDK's own 600 s default
# so a provider's timeout error (retryable, with a clear message) normally fires first.
ATTEMPT_TIMEOUT_CEILING = 900.0


class ModelError(ToolfleetError):
    """A model call failed for good (non-retryable, or retries exhausted)."""

    def __init__(self, model: str, message: str, retries: int = 0, retryable: bool = False) -> None:
        super().__init__(f"{model}: {message}")
        self.model = model
        self.retries = retries
        self.retryable = retryable


class ModelAPI(ABC):
    """One provider backend. Implementations live in ``_providers/<backend>.py``."""

    #: Whether ``get_model`` may hand the same instance to callers asking with equal arguments.
    #: Stateful backends (the scripted model replays a queue) must say False.
    memoize: ClassVar[bool] = True
    #: Environment variables the constructor reads (base URL, key): part of the memo key, so a model
    #: resolved after they changed is built anew rather than pointing at the old endpoint.
    environment: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None) -> None:
        self.model_name = model_name
        self.base_url = base_url
        self.api_key = api_key
        self.config = config or GenerateConfig()
        self.provider = "unknown"  # set by get_model from the registry name

    @abstractmethod
    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        """Make exactly one request. Raise on failure; ``Model`` decides whether to retry."""

    def should_retry(self, ex: BaseException) -> bool:
        """Whether ``ex`` is transient (rate limit, 5xx, connection). Default: never."""
        return False

    def retry_after(self, ex: BaseException) -> float | None:
        """Seconds the server asked us to wait (Retry-After), if it said."""
        return None

    def is_overload(self, ex: BaseException) -> bool:
        """Whether ``ex`` says the provider is over capacity (429, 529 overloaded): fewer connections help."""
        return getattr(ex, "status_code", None) in (429, 529)

    @classmethod
    def client_arg_names(cls) -> frozenset[str] | None:
        """``-M`` keys a provider with ``**client_args`` accepts beyond its constructor's own (None: any)."""
        return None

    def connection_limit(self) -> int | None:
        """At most this many requests in flight through one ``Model`` (None: unbounded)."""
        return None

    def batch_backend(self) -> BatchBackend | None:
        """The provider's batch API, used when ``GenerateConfig.batch`` is on (None: it has none)."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Release clients and connections."""


ModelAPIType = TypeVar("ModelAPIType", bound=type[ModelAPI])

# Built-in providers are imported on first use, so importing orchestrator.model stays cheap
# (the openai SDK takes a noticeable fraction of a second to import).
_PROVIDERS: dict[str, type[ModelAPI] | str] = {
    "anthropic": "orchestrator.model._providers.anthropic:AnthropicAPI",
    "openai": "orchestrator.model._providers.openai:OpenAIAPI",
    "scripted": "orchestrator.model._providers.scripted:ScriptedModelAPI",
    "mockllm": "orchestrator.model._providers.scripted:ScriptedModelAPI",
}


def modelapi(name: str) -> Callable[[ModelAPIType], ModelAPIType]:
    """Register a ``ModelAPI`` class as provider ``name`` (used as ``get_model("name/model")``)."""

    def register(cls: ModelAPIType) -> ModelAPIType:
        _PROVIDERS[name] = cls
        return cls

    return register


def model_providers() -> list[str]:
    return sorted(_PROVIDERS)


def _provider_class(name: str) -> type[ModelAPI]:
    entry = _PROVIDERS.get(name)
    if entry is None:
        raise ValueError(f"Unknown model provider '{name}' (known: {', '.join(model_providers())})")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _PROVIDERS[name] = entry
    return entry


def _as_tool_info(tool: Any) -> ToolInfo:
    if isinstance(tool, ToolInfo):
        return tool
    if isinstance(tool, ToolDef):
        return tool.info
    return tool_def(tool).info


class Model:
    """A provider plus its default config and retry policy. ``str(model)`` is ``provider/name``."""

    def __init__(self, api: ModelAPI, config: GenerateConfig | None = None, retry: RetryPolicy | None = None,
                 prices: PriceTable | None = None) -> None:
        self.api = api
        self.config = config or GenerateConfig()
        self.retry = retry or RetryPolicy()
        self.prices = prices or price_table()  # what each call's usage costs (``usage.total_cost``)
        limit = api.connection_limit()
        # Adaptive (AIMD) within the limit; shared by every copy of this model (see _with_config).
        self._slots = ConnectionLimiter(limit) if limit else None

    @property
    def name(self) -> str:
        return self.api.model_name

    def __str__(self) -> str:
        return f"{self.api.provider}/{self.api.model_name}"

    def __repr__(self) -> str:
        return f"Model({str(self)!r})"

    async def generate(self, input: str | list[ChatMessage], tools: Sequence[Any] = (),
                       tool_choice: ToolChoice | None = None, config: GenerateConfig | None = None) -> ModelOutput:
        """Generate one output; records a ``ModelEvent`` in a model span and counts usage."""
        messages: list[ChatMessage] = [ChatMessageUser(content=input)] if isinstance(input, str) else list(input)
        infos = [_as_tool_info(t) for t in tools]
        # Only meaningful with tools; providers reject tool_choice without them.
        choice = (tool_choice or "auto") if infos else None
        # Ambient (eval/agent) settings < this model's own < this call's.
        cfg = _merge(_merge(active_generate_config(), self.config), config)
        policy = self.retry if cfg.max_retries is None else self.retry.model_copy(
            update={"max_retries": cfg.max_retries})
        name = str(self)
        # Limits hold wherever the model is called (a hand-written agent loop included): an input
        # already at the message limit, or a token limit already reached, could only be exceeded.
        check_message_limit(len(messages), raise_for_equal=True)
        check_token_limit(raise_for_equal=True)

        with span(name=name, type="model"):
            event = ModelEvent(model=name, input_messages=len(messages), input=messages, tools=infos,
                               tool_choice=_choice_json(choice))
            start = time.monotonic()
            try:
                output, event.retries = await self._generate_with_retries(messages, infos, choice, cfg, policy)
            except ModelError as ex:
                event.retries, event.error, event.time = ex.retries, str(ex), time.monotonic() - start
                transcript().record(event)
                raise
            output.time = time.monotonic() - start
            output.model = output.model or self.name
            for choice_ in output.choices:
                choice_.message.source = "generate"
                choice_.message.model = choice_.message.model or self.name
            if output.usage is not None:
                if output.usage.total_cost is None:
                    # A provider that priced the call itself (a batch) set it; a batch result says so.
                    batch = bool(output.metadata and output.metadata.get("batch"))
                    output.usage.total_cost = self.prices.cost(name, output.usage, batch)
                record_model_usage(name, output.usage)
                record_token_usage(output.usage)
            # A snapshot: callers edit the returned message in place (react appends the submitted
            # answer), and the log must show what the model actually said.
            event.output = _snapshot(output)
            event.usage, event.time = output.usage, output.time
            transcript().record(event)
        # After the event is recorded, so the log shows the call that crossed a limit.
        check_token_limit()
        record_turn()
        return output

    async def generate_loop(self, input: str | list[ChatMessage], tools: Sequence[Any] = (),
                            config: GenerateConfig | None = None) -> tuple[list[ChatMessage], ModelOutput]:
        """Generate, run the tool calls, and repeat until the model stops calling tools.

        Returns the messages added to ``input`` and the final output (a handoff's output, if
        the last turn handed off).
        """
        # The engine is above this package (it asks approvers, reviewers and the dispatcher, which
        # use models): imported on first use, as tests/test_architecture.py allows here only.
        from orchestrator.execute import execute_tools

        start: list[ChatMessage] = [ChatMessageUser(content=input)] if isinstance(input, str) else list(input)
        messages = list(start)
        while True:
            output = await self.generate(messages, tools, config=config)
            messages.append(output.message)
            if not output.message.tool_calls:
                return messages[len(start):], output
            result = await execute_tools(messages, tools, config.max_tool_output if config else None)
            messages.extend(result.messages)
            if result.output is not None:
                output = result.output

    async def _generate_with_retries(self, messages: list[ChatMessage], infos: list[ToolInfo],
                                     choice: ToolChoice | None, cfg: GenerateConfig,
                                     policy: RetryPolicy) -> tuple[ModelOutput, int]:
        backoff = Backoff(policy)
        while True:
            attempt_started = time.monotonic()
            try:
                return await self._attempt(messages, infos, choice, cfg), backoff.retries
            except ModelError:
                raise
            except Exception as ex:
                # Our own per-attempt timeout is transient by nature, a batch says; anything else the provider judges.
                batched = isinstance(ex, BatchError)
                retryable = (ex.retryable if isinstance(ex, BatchError)
                             else isinstance(ex, TimeoutError) or self.api.should_retry(ex))
                if not retryable:
                    raise ModelError(str(self), _describe(ex), backoff.retries, False) from ex
                # A batch may take hours: max_elapsed (sized for direct calls) would forbid any retry after one.
                delay = backoff.delay(self.api.retry_after(ex), count_elapsed=not batched)
                if delay is None:
                    raise ModelError(str(self), f"giving up after {backoff.retries} retries: {_describe(ex)}",
                                     backoff.retries, True) from ex
                # A failed attempt that is retried, and the backoff after it, are waiting, not working
                # (Inspect's working time): only the attempt that answers is charged.
                report_wait_since(attempt_started)
                with sample_waiting():
                    await backoff.sleep(delay)

    async def _attempt(self, messages: list[ChatMessage], infos: list[ToolInfo], choice: ToolChoice | None,
                       cfg: GenerateConfig) -> ModelOutput:
        pool = batch_pool(self.api, cfg.batch, str(self)) if cfg.batch else None
        if pool is not None:
            # Neither a connection slot nor the per-attempt timeout: the request waits in a batch for
            # as long as the provider takes (the pool bounds that wait).
            with sample_waiting():  # a request queued in a provider batch is waiting, not working
                return await pool.generate(messages, infos, choice, cfg)
        limiter = self._slots
        if limiter is None:
            return await self._request(messages, infos, choice, cfg)
        with sample_waiting():  # queueing for a connection slot is waiting (Inspect's working time)
            epoch = await limiter.acquire()
        outcome: Outcome = "neutral"
        try:
            output = await self._request(messages, infos, choice, cfg)
            outcome = "success"
            return output
        except Exception as ex:
            outcome = "overload" if self.api.is_overload(ex) else "neutral"
            raise
        finally:
            change = limiter.release(epoch, outcome)
            if change is not None:
                _record_limit_change(str(self), limiter, change)

    async def _request(self, messages: list[ChatMessage], infos: list[ToolInfo], choice: ToolChoice | None,
                       cfg: GenerateConfig) -> ModelOutput:
        # Bound every wait: providers also get cfg.timeout, this covers ones that ignore it
        # (and a policy that never answers) even when no timeout was configured.
        async with asyncio.timeout(None) as scope:
            arm(scope, cfg.timeout or ATTEMPT_TIMEOUT_CEILING)
            return await self.api.generate(messages, infos, choice, cfg)

    @property
    def connections(self) -> ConnectionLimiter | None:
        """The adaptive bound on this model's requests in flight (None: unbounded)."""
        return self._slots

    async def aclose(self) -> None:
        await self.api.aclose()


def _record_limit_change(model: str, limiter: ConnectionLimiter, change: LimitChange) -> None:
    # In the transcript of the sample whose request moved the limit: the log shows when and why.
    transcript().record(InfoEvent(source=CONNECTIONS_SOURCE, data={
        "model": model, "connections": change.limit, "max_connections": limiter.ceiling, "reason": change.reason}))


def _merge(base: GenerateConfig, override: GenerateConfig | None) -> GenerateConfig:
    # Most calls pass no settings; skip the dump/rebuild that merge() costs on the hot path.
    if override is None or not override.model_fields_set:
        return base
    return base.merge(override)


def _choice_json(choice: ToolChoice | None) -> Any:
    return choice.model_dump() if isinstance(choice, ToolFunction) else choice


def _describe(ex: BaseException) -> str:
    return f"{type(ex).__name__}: {ex}" if str(ex) else type(ex).__name__


# -- the active model (set by whoever runs a sample or an agent; nested runs inherit it) -----------

_active_model: ContextVar[Model | None] = ContextVar("toolfleet_model", default=None)


def active_model() -> Model | None:
    return _active_model.get()


def init_active_model(model: Model) -> Token[Model | None]:
    """Make ``model`` what ``get_model()`` returns in this context (and tasks started from it)."""
    return _active_model.set(model)


@contextlib.contextmanager
def model_context(model: Model) -> Iterator[Model]:
    token = _active_model.set(model)
    try:
        yield model
    finally:
        _active_model.reset(token)


# -- get_model -------------------------------------------------------------------------------------

_MEMO: dict[str, Model] = {}


def get_model(model: str | Model | None = None, *, config: GenerateConfig | None = None,
              base_url: str | None = None, api_key: str | None = None, retry: RetryPolicy | None = None,
              memoize: bool = True, **model_args: Any) -> Model:
    """Resolve ``provider/model`` (or ``scripted``), a ``Model``, or the active model when ``None``.

    ``model_args`` go to the provider's constructor (e.g. ``outputs=`` / ``policy=`` for scripted).
    """
    if model is None:
        active = _active_model.get()
        if active is not None:
            return _with_config(active, config)
        model = os.environ.get(MODEL_ENV)
        if not model:
            raise ValueError(f"No model given, none active, and ${MODEL_ENV} is not set")
    if isinstance(model, Model):
        return _with_config(model, config)

    provider, _, model_name = model.partition("/")
    cls = _provider_class(provider)
    model_name = model_name or provider
    env = [os.environ.get(name) for name in cls.environment]
    key = repr((provider, model_name, base_url, api_key, config, retry, sorted(model_args.items()), env))
    if memoize and cls.memoize and key in _MEMO:
        return _MEMO[key]
    api = cls(model_name, base_url=base_url, api_key=api_key, config=config, **model_args)
    api.provider = provider
    # The provider's config: ``config`` plus what its own arguments set (``-M max_retries=3``).
    resolved = Model(api, api.config, retry)
    if memoize and cls.memoize:
        _MEMO[key] = resolved
    return resolved


def _with_config(model: Model, config: GenerateConfig | None) -> Model:
    if config is None or not config.model_dump(exclude_none=True):
        return model
    configured = Model(model.api, model.config.merge(config), model.retry, model.prices)
    configured._slots = model._slots  # same backend, same connection budget
    return configured


def _snapshot(output: ModelOutput) -> ModelOutput:
    """A copy of ``output`` whose containers (the output, its choices, messages and their lists) are
    its own, so edits through them — a message's text or content, a list appended to — leave it as
    it was; the leaves nobody edits in place (tool calls, content parts, usage: the event holds the
    same usage object already) are shared. A full dump-and-validate copy of every turn's output was
    a sixth of a long-running sample's memory."""
    choices = []
    for choice in output.choices:
        message = choice.message
        # only the containers: fields set stay as they were
        own = {name: list(value) if isinstance(value, list) else dict(value)
               for name, value in (("content", message.content), ("tool_calls", message.tool_calls),
                                   ("metadata", message.metadata))
               if isinstance(value, (list, dict))}
        choices.append(choice.model_copy(update={"message": message.model_copy(update=own)}))
    return output.model_copy(update={"choices": choices,
                                     **({"metadata": dict(output.metadata)} if output.metadata else {})})
