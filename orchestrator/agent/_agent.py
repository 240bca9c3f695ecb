"""``Agent``, ``AgentState``, the ``@agent`` registry and ``agent_with``.

An agent is ``async (state: AgentState, *args, **kwargs) -> AgentState``: a participant in the
conversation that appends messages and sets the output. ``@agent`` registers a factory so an agent
can be rebuilt by *registry name*; the *display name* (transcripts, handoff prompts,
``transfer_to_<name>``) is separate and can be changed with ``agent_with`` without touching the
registry entry.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, overload, runtime_checkable

from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant
from orchestrator.model._model_output import ChatCompletionChoice, ModelOutput
from orchestrator.util._limited_messages import MessageList

AGENT_META_ATTR = "__toolfleet_agent__"


class AgentState:
    """The conversation an agent reads and extends, and its latest output.

    ``messages`` is a ``MessageList``: growing it past the innermost message limit raises. If no
    output has been set, the first read of ``output`` synthesises one from the last assistant
    message (empty when there is none) and keeps it, so editing it sticks (as in Inspect).
    """

    def __init__(self, *, messages: list[ChatMessage], output: ModelOutput | None = None) -> None:
        self._messages: list[ChatMessage] = MessageList(messages)
        self._output = output
        self._output_set = output is not None

    @property
    def messages(self) -> list[ChatMessage]:
        return self._messages

    @messages.setter
    def messages(self, messages: list[ChatMessage]) -> None:
        self._messages = messages if isinstance(messages, MessageList) else MessageList(messages)

    @property
    def output(self) -> ModelOutput:
        if self._output is None:
            last = next((m for m in reversed(self._messages) if isinstance(m, ChatMessageAssistant)), None)
            if last is None:
                self._output = ModelOutput()
            else:
                self._output = ModelOutput(model=last.model or "",
                                           choices=[
                                               ChatCompletionChoice(message=last.model_copy(), stop_reason="stop")])
        return self._output

    @output.setter
    def output(self, output: ModelOutput | None) -> None:
        self._output = output
        self._output_set = output is not None

    @property
    def has_output(self) -> bool:
        """Whether an output was set explicitly (not synthesised from the messages)."""
        return self._output_set

    def copy(self) -> AgentState:
        """A deep copy (a run never edits its caller's messages)."""
        state = AgentState(messages=copy.deepcopy(list(self._messages)), output=copy.deepcopy(self._output))
        state._output_set = self._output_set
        return state

    def __copy__(self) -> AgentState:
        state = AgentState(messages=list(self._messages), output=self.output.model_copy())
        state._output_set = self._output_set
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentState:
        return self.copy()

    def __repr__(self) -> str:
        return f"AgentState(messages={len(self._messages)}, output={self._output is not None})"


@runtime_checkable
class Agent(Protocol):
    async def __call__(self, state: AgentState, *args: Any, **kwargs: Any) -> AgentState:
        """Extend ``state`` (append messages, set the output) and return it."""
        ...


@dataclass(frozen=True)
class AgentMeta:
    """Tagged on an agent instance: its registry name, factory arguments, display name and description."""

    registry_name: str
    name: str  # display name
    description: str | None = None
    params: dict[str, Any] | None = None


_REGISTRY: dict[str, Callable[..., Agent]] = {}


def agent_meta(agent: Any) -> AgentMeta | None:
    return getattr(agent, AGENT_META_ATTR, None)


def agent_name(agent: Any) -> str:
    """The display name of an agent (its function name when it is not registered)."""
    meta = agent_meta(agent)
    if meta is not None:
        return meta.name
    return getattr(agent, "__name__", type(agent).__name__)


def agent_description(agent: Any) -> str | None:
    meta = agent_meta(agent)
    if meta is not None and meta.description:
        return meta.description
    doc = inspect.getdoc(agent)
    return doc.split("\n\n")[0] if doc else None


def registered_agent_names() -> list[str]:
    return sorted(_REGISTRY)


def rebuild_agent(registry_name: str, **params: Any) -> Agent:
    """Build an agent from its registry name and factory arguments."""
    try:
        factory = _REGISTRY[registry_name]
    except KeyError:
        raise ValueError(f"No agent is registered as '{registry_name}'.") from None
    return factory(**params)


def _tag(instance: Any, meta: AgentMeta) -> Agent:
    try:
        setattr(instance, AGENT_META_ATTR, meta)
        return instance  # type: ignore[no-any-return]  # the callable, tagged: now an Agent
    except AttributeError:
        # Bound methods and some callables refuse attributes: wrap once.
        @functools.wraps(instance)
        async def wrapped(state: AgentState, *args: Any, **kwargs: Any) -> AgentState:
            result: AgentState = await instance(state, *args, **kwargs)
            return result

        setattr(wrapped, AGENT_META_ATTR, meta)
        return wrapped


@overload
def agent(func: Callable[..., Agent], /) -> Callable[..., Agent]: ...
@overload
def agent(
    *, name: str | None = ..., description: str | None = ...
) -> Callable[[Callable[..., Agent]], Callable[..., Agent]]: ...


def agent(func: Callable[..., Agent] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Register an agent factory. ``name`` is the registry name and the default display name.

    A factory whose instance is given a ``name=`` argument (as ``react(name=...)`` is) uses it as
    the display name; ``agent_with`` changes the display name of one instance.
    """

    def decorate(factory: Callable[..., Agent]) -> Callable[..., Agent]:
        registry_name = name or factory.__name__
        signature = inspect.signature(factory)

        @functools.wraps(factory)
        def wrapper(*args: Any, **kwargs: Any) -> Agent:
            instance = factory(*args, **kwargs)
            if not callable(instance):
                raise TypeError(
                    f"Agent factory '{registry_name}' must return an async callable, not {type(instance).__name__}.")
            bound = signature.bind(*args, **kwargs)
            params = dict(bound.arguments)
            existing = agent_meta(instance)
            display = params.get("name") if isinstance(params.get("name"), str) else None
            meta = AgentMeta(
                registry_name=registry_name,
                name=display or (existing.name if existing else registry_name),
                description=(params.get("description") if isinstance(params.get("description"), str) else None)
                or description or (existing.description if existing else None) or _doc_summary(factory),
                params=params,
            )
            return _tag(instance, meta)

        _REGISTRY[registry_name] = wrapper
        return wrapper

    return decorate(func) if func is not None else decorate


def agent_with(agent: Agent, *, name: str | None = None, description: str | None = None) -> Agent:
    """The same agent with another display name and/or description (the registry name is kept)."""
    meta = agent_meta(agent) or AgentMeta(registry_name=agent_name(agent), name=agent_name(agent))

    @functools.wraps(agent)
    async def renamed(state: AgentState, *args: Any, **kwargs: Any) -> AgentState:
        return await agent(state, *args, **kwargs)

    new = replace(meta, name=name or meta.name, description=description or meta.description)
    setattr(renamed, AGENT_META_ATTR, new)
    return renamed


def _doc_summary(func: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(func)
    return doc.split("\n\n")[0] if doc else None


def is_agent(obj: Any) -> bool:
    """Whether ``obj`` was made by an ``@agent`` factory (or ``agent_with``)."""
    return agent_meta(obj) is not None
