"""The exception ``execute_tools`` raises for a tool error fatal to the sample.

Inspect re-raises the tool's own exception, so ported code catches ``RuntimeError`` (or its own
exception class). Toolfleet code catches ``ToolExecutionFatal`` and reads ``.fatal``. The raised
exception is both: an instance of a subclass of the original type and of ``ToolExecutionFatal``,
carrying the original's arguments and attributes (``str``/``repr`` read as the original's).

Across the queue the original object does not travel (the wire carries data, not pickles); a
builtin exception type is rebuilt from its name, anything else stays a plain ``ToolExecutionFatal``.
"""

from __future__ import annotations

import builtins

from orchestrator._wire import FatalError, ToolExecutionFatal

_DUAL: dict[type[BaseException], type[ToolExecutionFatal]] = {}


def _dual_class(base: type[BaseException]) -> type[ToolExecutionFatal] | None:
    if issubclass(base, ToolExecutionFatal):
        return base
    if not issubclass(base, Exception):
        return None  # KeyboardInterrupt & co. are never wrapped
    cls = _DUAL.get(base)
    if cls is None:
        try:
            cls = type(base.__name__, (base, ToolExecutionFatal),
                       {"__module__": base.__module__, "__qualname__": base.__qualname__})
        except TypeError:  # incompatible layout or metaclass: no dual type possible
            return None
        _DUAL[base] = cls
    return cls


def _original(fatal: FatalError, exception: BaseException | None) -> BaseException | None:
    if exception is not None:
        return exception
    named = getattr(builtins, fatal.type, None)
    if isinstance(named, type) and issubclass(named, Exception):
        try:
            return named(fatal.message)
        except Exception:  # noqa: BLE001 - a constructor wanting other arguments: no builtin then
            return None
    return None


def fatal_exception(fatal: FatalError, function: str, exception: BaseException | None) -> ToolExecutionFatal:
    """The exception to raise for a fatal call outcome (keeps the tool's exception type when it can)."""
    original = _original(fatal, exception)
    cls = _dual_class(type(original)) if original is not None else None
    if original is None or cls is None:
        return ToolExecutionFatal(fatal, function)
    try:
        args = original.args
        if isinstance(original, OSError) and original.filename is not None:  # filename is not in args
            args = (original.errno, original.strerror, original.filename, None, original.filename2)
        raised = cls.__new__(cls, *args)
        raised.args = original.args
        raised.__dict__.update(getattr(original, "__dict__", {}))
    except Exception:  # noqa: BLE001 - a class that cannot be rebuilt from its args: the generic fatal
        return ToolExecutionFatal(fatal, function)
    raised.fatal = fatal
    raised.function = function
    return raised
