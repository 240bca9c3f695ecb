"""A console prompt shared by the human approver and human reviewer.

Prompts from concurrent samples are serialised; reading stdin happens in a thread so the event loop
keeps serving other samples; without a TTY it fails at once rather than hang.
"""

from __future__ import annotations

import asyncio
import sys
import threading


class NoTerminalError(RuntimeError):
    """A human decision was asked for but there is no interactive terminal."""


_lock = threading.Lock()


class ConsolePrompt:
    def __init__(self, choices: list[str]) -> None:
        self.choices = choices

    def _ask_blocking(self, text: str) -> tuple[str | None, str | None]:
        keys = {c[0]: c for c in self.choices} if len({c[0] for c in self.choices}) == len(self.choices) else {}
        menu = " / ".join(f"[{c[0]}]{c[1:]}" if keys else c for c in self.choices)
        with _lock:
            out = sys.stdout
            out.write(f"\n{text}\n")
            out.flush()
            while True:
                out.write(f"Decision ({menu}): ")
                out.flush()
                line = sys.stdin.readline()
                if line == "":  # end of input: dismissed
                    out.write("\n")
                    return None, None
                answer = line.strip().lower()
                choice = keys.get(answer) if len(answer) == 1 else (answer if answer in self.choices else None)
                if choice is not None:
                    out.write("Explanation (optional): ")
                    out.flush()
                    explanation = sys.stdin.readline().strip() or None
                    return choice, explanation
                out.write(f"Please answer one of: {', '.join(self.choices)}\n")

    async def ask(self, text: str) -> tuple[str | None, str | None]:
        if not sys.stdin.isatty():
            raise NoTerminalError(
                "A human decision is needed but stdin is not an interactive terminal; "
                "use a policy file (e.g. --approval policy.yaml) for unattended runs."
            )
        return await asyncio.to_thread(self._ask_blocking, text)
