"""A console prompt shared by the human approver and the human reviewer.

Prompts from concurrent samples are serialised (one operator, one terminal). The terminal is read
in a worker thread so the event loop keeps serving other samples; that thread polls with
``select`` and a cancel flag, so cancelling the awaiting coroutine (the sample stopped, the call was
cancelled) really frees the terminal instead of leaving a reader behind that would swallow the
next answer. Without an interactive terminal ``ask`` fails at once rather than hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from orchestrator._errors import ControlFlowSignal, ToolfleetError
from orchestrator.util._running_sample import running_sample
from orchestrator.util._terminal import terminal_safe

# Poll period of the reading thread: how quickly a cancelled prompt lets go of the terminal.
_POLL_SECONDS = 0.1


class NoTerminalError(ToolfleetError, RuntimeError):
    """A human decision was asked for but there is no interactive terminal."""


@dataclass(frozen=True)
class Choice:
    """One answer the operator may give: the decision it stands for and how it is shown."""

    value: str
    label: str
    aliases: frozenset[str] = field(default_factory=frozenset)


_lock = threading.Lock()

# Context-manager factories entered around every prompt: a live progress display registers one that
# pauses it (and gives back the real stdout it redirects) while the operator answers.
_guards: list[Callable[[], AbstractContextManager[object]]] = []


def add_prompt_guard(guard: Callable[[], AbstractContextManager[object]]) -> None:
    """Enter ``guard()`` around each console prompt (e.g. pause a live display) until removed."""
    _guards.append(guard)


def remove_prompt_guard(guard: Callable[[], AbstractContextManager[object]]) -> None:
    with contextlib.suppress(ValueError):
        _guards.remove(guard)


class _Cancelled(ControlFlowSignal):
    pass


class ConsolePrompt:
    """Ask the operator to pick one of ``choices``; ``None`` means the prompt was dismissed (EOF)."""

    def __init__(self, choices: list[Choice], kind: str = "approval") -> None:
        self.choices = choices
        self.kind = kind  # names the policy flag in the no-terminal error (--approval / --review)
        initials = [c.label[0].lower() for c in choices]
        self._keys: dict[str, str] = {}
        for choice in choices:
            for word in {choice.label.lower(), choice.value.lower(), *choice.aliases}:
                self._keys[word] = choice.value
        if len(set(initials)) == len(initials):  # single-letter answers only when unambiguous
            for letter, choice in zip(initials, choices, strict=True):
                self._keys.setdefault(letter, choice.value)
            self.menu = " / ".join(f"[{c.label[0]}]{c.label[1:]}" for c in choices)
        else:
            self.menu = " / ".join(c.label for c in choices)

    def parse(self, answer: str) -> str | None:
        return self._keys.get(answer.strip().lower())

    async def ask(self, text: str) -> tuple[str | None, str | None]:
        """Show ``text`` and return ``(decision, explanation)``; ``(None, None)`` when dismissed."""
        if not _interactive():
            raise NoTerminalError(
                f"A human {self.kind} decision is needed but stdin is not an interactive terminal; "
                f"use a policy file (e.g. --{self.kind} policy.yaml) for unattended runs."
            )
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._ask_blocking, text, cancel)
        except BaseException:
            # Cancelled (or failed): tell the reader thread to let go of the terminal.
            cancel.set()
            raise

    def _ask_blocking(self, text: str, cancel: threading.Event) -> tuple[str | None, str | None]:
        while not _lock.acquire(timeout=_POLL_SECONDS):
            if cancel.is_set():
                return None, None
        try:
            with contextlib.ExitStack() as guards:
                for guard in list(_guards):
                    guards.enter_context(guard())
                return self._converse(text, cancel)
        finally:
            _lock.release()

    def _converse(self, text: str, cancel: threading.Event) -> tuple[str | None, str | None]:
        try:
            out = sys.stdout  # after the guards: a paused live display has given the real stdout back
            out.write(f"\n{terminal_safe(text)}\n")  # the call and result are model/sandbox text
            out.flush()
            reader = _LineReader(sys.stdin.fileno(), cancel)
            while True:
                out.write(f"Decision ({self.menu}): ")
                out.flush()
                line = reader.readline()
                if line is None:  # end of input: the operator dismissed the prompt
                    out.write("\n[dismissed]\n")
                    out.flush()
                    return None, None
                choice = self.parse(line)
                if choice is not None:
                    out.write("Explanation (optional): ")
                    out.flush()
                    explanation = reader.readline()
                    return choice, (explanation or "").strip() or None
                out.write(f"Please answer one of: {', '.join(c.label for c in self.choices)}\n")
        except _Cancelled:
            try:
                sys.stdout.write("\n[prompt cancelled]\n")
                sys.stdout.flush()
            except OSError:
                pass
            return None, None


class _LineReader:
    """Read lines from a terminal fd with ``select`` so a cancel flag is noticed within a poll period.

    Reads the raw fd (not ``sys.stdin``'s buffer) so nothing typed is hidden in a Python buffer
    where ``select`` cannot see it.
    """

    def __init__(self, fd: int, cancel: threading.Event) -> None:
        self.fd = fd
        self.cancel = cancel
        self.buffer = b""

    def readline(self) -> str | None:
        while b"\n" not in self.buffer:
            if self.cancel.is_set():
                raise _Cancelled
            ready, _, _ = select.select([self.fd], [], [], _POLL_SECONDS)
            if not ready:
                continue
            chunk = os.read(self.fd, 4096)
            if not chunk:  # EOF (Ctrl-D on an empty line, or the terminal went away)
                if self.buffer:
                    line, self.buffer = self.buffer, b""
                    return line.decode(errors="replace")
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace")


def _interactive() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached stdin
        return False


def current_sample_label() -> str | None:
    """``<sample id>`` (``/ epoch N`` past the first) of the running sample, if any: which sample is asking."""
    state = running_sample()
    if state is None:
        return None
    return f"{state.sample_id}" if state.epoch == 1 else f"{state.sample_id} / epoch {state.epoch}"


def render_call_prompt(title: str, message: str, call_text: str, context: str | None, view: str | None,
                       result: str | None = None) -> str:
    """The text shown above a decision prompt: the call, its rendered view, and (review) the result."""
    lines = [f"=== {title} ==="]
    sample = current_sample_label()
    if sample is not None:  # concurrent samples share one operator: say which one is asking
        lines.append(f"Sample: {sample}")
    lines.append(f"Call: {call_text}")
    if message:
        lines.append(f"Assistant: {message}")
    if context:
        lines += ["--- context ---", context]
    if view:
        lines += ["--- view ---", view]
    if result is not None:
        lines += ["--- result ---", result]
    return "\n".join(lines)
