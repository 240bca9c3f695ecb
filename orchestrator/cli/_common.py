"""Shared CLI helpers: exit codes, one-line errors, ``k=v`` parsing."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

import yaml

EXIT_USER_ERROR = 1
EXIT_INTERRUPTED = 130


def fail(message: str) -> int:
    """Print one clear line on stderr; return the exit code."""
    from orchestrator.util._terminal import terminal_safe

    # One line, whatever the exception text held (it may quote a sandbox, a model or a worker).
    line = terminal_safe(" ".join(str(message).split()), keep_newlines=False)
    print(f"toolfleet: error: {line}", file=sys.stderr)
    return EXIT_USER_ERROR


class OneLineParser(argparse.ArgumentParser):
    """A bad flag or value is one clear line (naming the command's --help), not usage plus an error."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(2)


def parse_kv(items: list[str] | None, flag: str) -> dict[str, Any]:
    """``k=v`` pairs; values are YAML scalars (``n=3`` is an int, ``x=true`` a bool, ``s=abc`` a str)."""
    from orchestrator._errors import SetupError

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SetupError(f"{flag} expects KEY=VALUE, got '{item}'.")
        try:
            out[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            out[key] = value
    return out
