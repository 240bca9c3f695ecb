"""The sandbox seam: what a tool sees of the sample's sandbox, whichever driver made it.

Drivers (``workers.sandbox.local``, ``workers.sandbox.docker``) implement ``SandboxEnvironment``;
the executor binds the current sample's environment to a context variable around each tool call
so a tool reaches it with ``sandbox()``.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal, overload

from pydantic import BaseModel

from orchestrator._errors import ToolfleetError


class ExecResult(BaseModel):
    """The outcome of one command: exit code, both streams kept apart, and whether either was capped."""

    returncode: int
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False  # output exceeded the per-stream cap and was cut at the source

    @property
    def success(self) -> bool:
        return self.returncode == 0


class SandboxTimeoutError(ToolfleetError, TimeoutError):
    """A command outlived its timeout; its process group was killed. Partial output is kept.

    ``truncated_output`` (Inspect's name) is what the model sees beside the timeout error; when not
    given it is the partial stderr then stdout.
    """

    def __init__(self, message: str = "Command timed out before completing.", truncated_output: str | None = None,
                 *, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr
        if truncated_output is None:
            truncated_output = "".join(part for part in (stderr, stdout) if part) or None
        self.truncated_output = truncated_output


class OutputLimitExceededError(ToolfleetError):
    """More output than a tool may return (e.g. reading a file larger than the limit)."""

    def __init__(self, limit_str: str, truncated_output: str | None = None) -> None:
        super().__init__(f"The tool exceeded its output limit of {limit_str}.")
        self.limit_str = limit_str
        self.truncated_output = truncated_output


class SandboxUnavailableError(ToolfleetError, RuntimeError):  # a RuntimeError as Inspect's
    """The sandbox (or the worker host holding it) is gone; the sentence says what was lost."""


class SandboxLostError(SandboxUnavailableError):
    """The sample's sandbox, the worker host holding it, or the host holding the snapshot a fork starts
    from, went away: the sample cannot go on there (it is retried in a new sandbox when it may be)."""


class SandboxEnvironment(ABC):
    """One sample's sandbox."""

    @abstractmethod
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (argv, no shell). Stdin is closed unless ``input`` is given.

        Raises ``SandboxTimeoutError`` (a ``TimeoutError``) after killing the whole process group.
        """

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...
    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    @abstractmethod
    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read a file. Raises FileNotFoundError, PermissionError, IsADirectoryError,
        UnicodeDecodeError (text=True and not UTF-8) or OutputLimitExceededError."""

    @abstractmethod
    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write a file, creating parent directories."""

    async def snapshot(self, keep: bool = False) -> Any:
        """Capture this sandbox's filesystem as a ``Snapshot`` on its host (docker sandboxes; see
        ``orchestrator.util.fork``). ``keep``: outlive the eval (otherwise removed when it ends)."""
        from ._snapshot import SnapshotError

        raise SnapshotError(f"This sandbox ({type(self).__name__}) cannot be snapshotted: use a docker sandbox.")

    # Inspect's lifecycle hooks, so a port's subclass keeps its overrides importable. Toolfleet's
    # drivers own the lifecycle (create, pool, reap), so the engine does not call these.
    @classmethod  # noqa: B027 - optional hook: does nothing unless overridden
    async def task_init(cls, task_name: str, config: Any | None) -> None:
        """Called once per task before its samples in Inspect; a no-op by default."""

    @classmethod  # noqa: B027 - optional hook: does nothing unless overridden
    async def task_cleanup(cls, task_name: str, config: Any | None, cleanup: bool) -> None:
        """Called once per task after its samples in Inspect; a no-op by default."""

    @classmethod
    async def sample_init(cls, task_name: str, config: Any | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        """Inspect creates a sample's environments here; toolfleet's drivers do (see ``workers.sandbox``)."""
        raise NotImplementedError(
            f"{cls.__name__}.sample_init: toolfleet creates sandboxes through drivers "
            "(workers.sandbox.local / docker), not through SandboxEnvironment.sample_init."
        )

    @classmethod  # noqa: B027 - optional hook: does nothing unless overridden
    async def sample_cleanup(cls, task_name: str, config: Any | None, environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        """Called after each sample in Inspect; a no-op by default."""


_current: ContextVar[SandboxEnvironment | None] = ContextVar("toolfleet_sandbox", default=None)
_named: ContextVar[dict[str, SandboxEnvironment] | None] = ContextVar("toolfleet_sandboxes", default=None)


def sandbox(name: str | None = None) -> SandboxEnvironment:
    """The current sample's sandbox (inside a tool call); ``name``: one service of a multi-service sandbox."""
    envs = _named.get()
    if name is not None and (envs or name != "default"):
        if not envs or name not in envs:
            known = ", ".join(sorted(envs or {})) or "none: the sample has one sandbox, 'default'"
            raise ValueError(f"No sandbox named '{name}' for this sample (its sandboxes: {known}).")
        return envs[name]
    env = _current.get()
    if env is None:
        raise RuntimeError(
            "No sandbox is bound to this tool call: give the task a sandbox (e.g. sandbox='local' or 'docker')."
        )
    return env


@contextlib.contextmanager
def bind_sandbox(env: SandboxEnvironment | None, named: dict[str, SandboxEnvironment] | None = None) -> Iterator[None]:
    """Bind a sandbox to the current context (the executor does this around each call)."""
    token = _current.set(env)
    named_token = _named.set(named)
    try:
        yield
    finally:
        _current.reset(token)
        _named.reset(named_token)
