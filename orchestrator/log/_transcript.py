"""The per-sample transcript and the span tree.

A ``Transcript`` is bound to the running sample by a context variable; every event recorded gets the
current span id, so agent, tool, handoff and model spans nest into a tree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from orchestrator._ids import new_id
from orchestrator.util._subtask import SUBTASK_TRACE

from ._events import BaseEvent, InfoEvent, ModelEvent, SpanBeginEvent, SpanEndEvent

_RECENT_INPUTS = 4  # model inputs remembered for sharing (interleaved agents each have their own)


class Transcript:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []
        self._listeners: list[Callable[[BaseEvent], None]] = []
        self._inputs: list[tuple[str, list[Any]]] = []  # recent model events' whole inputs, newest last

    def record(self, event: BaseEvent) -> BaseEvent:
        if event.span_id is None:
            # Not through pydantic's __setattr__ (a few µs per event, several events per tool call):
            # a plain optional str field of a model without validate_assignment, marked set as it would.
            event.__dict__["span_id"] = _current_span.get()
            event.__pydantic_fields_set__.add("span_id")
        if isinstance(event, ModelEvent) and event.input and event.input_ref is None:
            self._share_input(event)
        self.events.append(event)
        for listener in self._listeners:
            listener(event)
        return event

    def _share_input(self, event: ModelEvent) -> None:
        """Keep only what this input adds to the recent one it shares the longest head with."""
        whole = list(event.input or [])
        best, best_n = None, 0
        for uuid, earlier in reversed(self._inputs):
            n = _common_head(earlier, whole)
            if n > best_n:
                best, best_n = uuid, n
        if best is not None:
            event.input, event.input_ref, event.input_ref_count = whole[best_n:], best, best_n
            # The head equals the earlier snapshot's: keep that one's message dicts, not fresh copies
            # (each turn re-dumps the whole conversation; without this every remembered input held
            # its own copy of it — a quarter of a long-running sample's memory).
            earlier = next(whole_ for uuid, whole_ in self._inputs if uuid == best)
            whole = earlier[:best_n] + whole[best_n:]
        self._inputs.append((event.uuid, whole))
        del self._inputs[:-_RECENT_INPUTS]

    def info(self, data: Any, source: str | None = None) -> None:
        self.record(InfoEvent(data=data, source=source))

    def subscribe(self, listener: Callable[[BaseEvent], None]) -> None:
        self._listeners.append(listener)

    def find(self, kind: type[BaseEvent]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def _common_head(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_transcript: ContextVar[Transcript | None] = ContextVar("toolfleet_transcript", default=None)
_current_span: ContextVar[str | None] = ContextVar("toolfleet_span", default=None)
_fallback = Transcript()


def transcript() -> Transcript:
    """The current sample's transcript (a process-wide fallback outside samples)."""
    return _transcript.get() or _fallback


def current_span_id() -> str | None:
    return _current_span.get()


@contextlib.contextmanager
def bind_transcript(t: Transcript) -> Iterator[Transcript]:
    token = _transcript.set(t)
    try:
        yield t
    finally:
        _transcript.reset(token)


class span:  # used as a function: `with span(name=..., type=...) as span_id:`
    """Open a span; events recorded inside carry its id; nested spans become its children.

    A class rather than a generator-based context manager: one opens around every tool call."""

    __slots__ = ("_name", "_type", "_id", "_parent", "_transcript", "_token")

    def __init__(self, name: str, type: str | None = None) -> None:
        self._name, self._type = name, type

    def __enter__(self) -> str:
        self._id = span_id = new_id()
        self._parent = parent = _current_span.get()
        self._transcript = t = transcript()
        t.record(SpanBeginEvent(id=span_id, parent_id=parent, type=self._type, name=self._name, span_id=parent))
        self._token = _current_span.set(span_id)
        return span_id

    def __exit__(self, *exc: object) -> None:
        _current_span.reset(self._token)
        self._transcript.record(SpanEndEvent(id=self._id, span_id=self._parent))


# ``orchestrator.util.subtask`` records into the transcript through this (util sits below this package).
SUBTASK_TRACE.install(lambda name, type: span(name=name, type=type),
                      lambda data, source: transcript().info(data, source=source))
