"""Sandbox size limits (Inspect's ``SandboxEnvironmentLimits``), overridable per context or process.

The read-file cap defaults to 100 MiB; ``TOOLFLEET_SANDBOX_MAX_READ_FILE_SIZE`` (or Inspect's
``INSPECT_SANDBOX_MAX_READ_FILE_SIZE``) sets it for a process — the way to change it for workers,
which run in other processes — and ``override_max_read_file_size`` changes it for one block of an
in-process run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar

DEFAULT_MAX_READ_FILE_SIZE = 100 * 1024**2
DEFAULT_MAX_EXEC_OUTPUT_SIZE = 10 * 1024**2


def size_str(size: int) -> str:
    """``100 MiB``-style text, as Inspect words limits in its errors."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def _from_env(names: tuple[str, ...], default: int) -> int:
    for name in names:
        raw = os.environ.get(name)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{name} must be an integer (bytes), got '{raw}'.") from None
        if value <= 0:
            raise ValueError(f"{name} must be a positive integer (bytes), got {value}.")
        return value
    return default


_read_override: ContextVar[int | None] = ContextVar("toolfleet_max_read_file_size", default=None)


def max_read_file_size() -> int:
    override = _read_override.get()
    if override is not None:
        return override
    return _from_env(("TOOLFLEET_SANDBOX_MAX_READ_FILE_SIZE", "INSPECT_SANDBOX_MAX_READ_FILE_SIZE"),
                     DEFAULT_MAX_READ_FILE_SIZE)


class _Size:
    def __init__(self, read: bool, text: bool) -> None:
        self.read, self.text = read, text

    def __get__(self, obj: object, owner: type | None = None) -> int | str:
        size = max_read_file_size() if self.read else DEFAULT_MAX_EXEC_OUTPUT_SIZE
        return size_str(size) if self.text else size


class SandboxEnvironmentLimits:
    """Current sandbox limits, read as class attributes (as in Inspect)."""

    MAX_READ_FILE_SIZE: int = _Size(read=True, text=False)  # type: ignore[assignment]  # a descriptor reading the live limit, typed as Inspect's constant
    MAX_READ_FILE_SIZE_STR: str = _Size(read=True, text=True)  # type: ignore[assignment]  # a descriptor, as above
    MAX_EXEC_OUTPUT_SIZE: int = _Size(read=False, text=False)  # type: ignore[assignment]  # a descriptor, as above
    MAX_EXEC_OUTPUT_SIZE_STR: str = _Size(read=False, text=True)  # type: ignore[assignment]  # a descriptor, as above


@contextlib.contextmanager
def override_max_read_file_size(limit: int) -> Iterator[None]:
    """Raise (or lower) the read-file cap for reads made in this block (in-process)."""
    if limit <= 0:
        raise ValueError(f"The read file size limit must be positive, got {limit}.")
    token = _read_override.set(limit)
    try:
        yield
    finally:
        _read_override.reset(token)
