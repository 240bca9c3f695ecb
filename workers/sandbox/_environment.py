"""``SandboxEnvironment`` on top of agent channels: the exec semantics both drivers share.

A channel is opened lazily per user (the agent never switches users, so Docker capabilities stay
dropped); a subclass says how to open one and may provide a slower universal path for images whose
agent cannot start. File reads and writes are commands too, so both drivers treat paths, users and
permissions identically.
"""

from __future__ import annotations

import asyncio
import shlex
from abc import abstractmethod
from typing import Any, Literal, overload

import structlog

from orchestrator.tool._errors import ToolParsingError
from orchestrator.util._sandbox import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxTimeoutError,
    SandboxUnavailableError,
)
from orchestrator.util._sandbox_limits import SandboxEnvironmentLimits, size_str

from ._channel import AgentChannel, ChannelClosed, RawResult
from ._errors import CommandOutOfMemoryError, ExecAgentLostError

log = structlog.get_logger("toolfleet.sandbox")

WARM_SPARES = 2
READ_FILE_LIMIT = 100 * 1024 * 1024  # larger files are an OutputLimitExceededError, as in Inspect
# Exit codes of the file scripts below, mapped to the exceptions tools expect.
_READ_SCRIPT = (
    'f="$1"; if [ -d "$f" ]; then exit 21; fi; if [ ! -e "$f" ]; then exit 2; fi; '
    'if [ ! -r "$f" ]; then exit 13; fi; exec cat -- "$f"'
)
_WRITE_SCRIPT = (
    'f="$1"; if [ -d "$f" ]; then exit 21; fi; d=$(dirname -- "$f"); '
    '[ -d "$d" ] || mkdir -p -- "$d" 2>/dev/null || exit 13; (cat > "$f") 2>/dev/null || exit 13'
)


class AgentSandboxEnvironment(SandboxEnvironment):
    """A sandbox reached through per-user agent channels. ``state`` is scratch space for tools."""

    # On a worker: admits and pins the user of every command (``workers._exec_user``); None: embedded.
    user_gate: Any = None

    def __init__(self, sandbox_id: str, output_cap: int, default_env: dict[str, str] | None = None) -> None:
        self.sandbox_id = sandbox_id
        self.output_cap = output_cap
        self.default_env = dict(default_env or {})  # the sample's env, under each call's own env
        self.state: dict[str, Any] = {}  # e.g. text_editor undo history, bash_session sessions
        self._channels: dict[str | None, AgentChannel] = {}
        self._opening: dict[str | None, asyncio.Lock] = {}
        self.fast_path = True  # False once the agent could not start: the universal path is used
        self._had_agent = False
        self.closed = False
        # Warm spares per (user, cwd, env) for the python tool's exact command; 0 disables. Each
        # is one idle process (counted against the pids limit; the agent frees them when short).
        self.warm_spares = WARM_SPARES

    # --- subclass hooks -------------------------------------------------------------------------

    @abstractmethod
    async def _open_channel(self, user: str | None) -> AgentChannel:
        """Start an agent running as ``user`` (None: the sandbox's default user)."""

    async def _universal_exec(
        self, argv: list[str], input: bytes | None, cwd: str | None, env: dict[str, str] | None,
        user: str | None, timeout: float | None, cap: int,
    ) -> RawResult:
        raise SandboxUnavailableError(f"Sandbox '{self.sandbox_id}': the exec agent could not start.")

    async def _sandbox_failure(self, exc: BaseException) -> BaseException | None:
        """Why the sandbox itself is gone after its channel died, or None if it is intact (the agent
        alone was lost: it is restarted and the call gets a model-visible error)."""
        return None

    @property
    def memory_limit(self) -> str | None:
        return None

    # --- SandboxEnvironment ----------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        raw = await self.exec_raw(cmd, input=input, cwd=cwd, env=env, user=user, timeout=timeout)
        stdout = raw.stdout.decode("utf-8", "replace")
        stderr = raw.stderr.decode("utf-8", "replace")
        if raw.timed_out:
            raise SandboxTimeoutError(stdout=stdout, stderr=stderr)
        return ExecResult(returncode=raw.returncode, stdout=stdout, stderr=stderr, truncated=raw.truncated)

    async def exec_raw(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: float | None = None,
        cap: int | None = None,
        *,
        trusted: bool = False,
    ) -> RawResult:
        """Like ``exec`` but bytes in and out, and timeouts reported in the result (not raised).
        ``trusted``: the worker's own command (a snapshot reading as root), not a message's: no user gate."""
        if self.closed:
            raise SandboxUnavailableError(f"Sandbox '{self.sandbox_id}' has been destroyed.")
        if not cmd:
            raise ValueError("exec() needs a non-empty argv")
        if self.user_gate is not None and not trusted:
            user = await self.user_gate(self, user)
        _check_command(cmd, cwd, env, input)
        data = input.encode("utf-8") if isinstance(input, str) else input
        cap = cap or self.output_cap
        if self.default_env:
            env = {**self.default_env, **(env or {})}
        if self.fast_path:
            channel: AgentChannel | None = None
            try:
                channel = await self._channel(user)
                raw = None if channel is None else await channel.run(
                    list(cmd), data, cwd, env, timeout, cap, self.warm_spares
                )
            except ChannelClosed as exc:
                raise await self._lost_agent(user, channel, exc) from exc
            if raw is not None:
                if raw.oom:
                    raise CommandOutOfMemoryError(self._oom_message())
                return raw
        return await self._universal_exec(list(cmd), data, cwd, env, user, timeout, cap)

    async def _lost_agent(self, user: str | None, dead: AgentChannel | None, exc: BaseException) -> BaseException:
        """The agent's channel died under a call: the sandbox is gone, or the agent is restarted.

        A command can kill the agent (it runs as the same user: ``kill -9 -1``, ``pkill python3``) or
        the kernel can pick it when the sandbox runs out of memory; either way the sample goes on.
        """
        if self.closed:
            return SandboxUnavailableError(f"Sandbox '{self.sandbox_id}' has been destroyed.")
        failure = await self._sandbox_failure(exc)
        if failure is not None:
            return failure
        try:
            fresh = await self._channel(user)
        except (ChannelClosed, OSError) as again:
            return await self._sandbox_failure(again) or SandboxUnavailableError(
                f"Sandbox '{self.sandbox_id}': its exec agent was lost and could not be restarted ({again})."
            )
        before = None if dead is None else dead.info.get("oom_kills")
        after = None if fresh is None else fresh.info.get("oom_kills")
        if before is not None and after is not None and after > before:
            return CommandOutOfMemoryError(self._oom_message())
        return ExecAgentLostError(
            "The command's output was lost: the sandbox's exec agent was killed while the command ran "
            "(e.g. by `kill -9 -1` or `pkill python3`). The sandbox is intact and the agent was restarted: "
            "the next command runs normally."
        )

    def _oom_message(self) -> str:
        limit = f" (memory limit {self.memory_limit})" if self.memory_limit else ""
        return (f"Out of memory: the command was killed by the OOM killer because the sandbox reached its memory "
                f"limit{limit}. The sandbox is still running; use less memory.")

    async def _channel(self, user: str | None) -> AgentChannel | None:
        channel = self._channels.get(user)
        if channel is not None and not channel.closed:
            return channel
        lock = self._opening.setdefault(user, asyncio.Lock())
        async with lock:
            channel = self._channels.get(user)
            if channel is not None and not channel.closed:
                return channel
            if not self.fast_path:
                return None
            try:
                channel = await self._open_channel(user)
            except ChannelClosed as exc:
                if user is not None and None in self._channels:
                    # The agent runs for the default user, so this user is the problem (e.g. unknown).
                    raise PermissionError(1, f"Cannot run commands as user '{user}' ({exc})", user) from exc
                if self._had_agent:
                    raise  # the agent worked before: the sandbox is in trouble, not the image
                self.fast_path = False
                log.warning(
                    "sandbox.fast_path_unavailable",
                    sandbox=self.sandbox_id,
                    reason=str(exc),
                    detail="exec agent could not start (no python3?); using the slower universal exec path",
                )
                return None
            self._channels[user] = channel
            self._had_agent = True
            return channel

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...
    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE  # 100 MiB unless overridden (as in Inspect)
        raw = await self.exec_raw(["/bin/sh", "-c", _READ_SCRIPT, "sh", file], cap=limit)
        _raise_for_file(raw, file)
        if raw.truncated:
            raise OutputLimitExceededError(limit_str=size_str(limit), truncated_output=None)
        return raw.stdout.decode("utf-8") if text else raw.stdout  # strict: UnicodeDecodeError reaches the tool

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        raw = await self.exec_raw(["/bin/sh", "-c", _WRITE_SCRIPT, "sh", file], input=data)
        _raise_for_file(raw, file)

    async def aclose(self) -> None:
        self.closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        await asyncio.gather(*(c.aclose() for c in channels), return_exceptions=True)


def _check_command(cmd: list[str], cwd: str | None, env: dict[str, str] | None, input: str | bytes | None) -> None:
    """Reject what no process can take before it reaches the agent: the model sees a parsing error."""
    texts = [*cmd, *([cwd] if cwd else []), *((env or {}).keys()), *((env or {}).values())]
    for text in texts:
        if not isinstance(text, str):
            raise ToolParsingError(f"A command argument must be a string, not {type(text).__name__}.")
        if "\0" in text:
            raise ValueError("embedded null byte")  # classified as the parsing error Inspect gives
    for text in texts + ([input] if isinstance(input, str) else []):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = text[exc.start : exc.end].encode("unicode_escape").decode()
            raise ToolParsingError(
                f"The command contains a lone surrogate ({bad}), which cannot be encoded as UTF-8."
            ) from None


def _raise_for_file(raw: RawResult, file: str) -> None:
    if raw.returncode == 0:
        return
    if raw.returncode == 2:
        raise FileNotFoundError(2, "No such file or directory", file)
    if raw.returncode == 13:
        raise PermissionError(13, "Permission denied", file)
    if raw.returncode == 21:
        raise IsADirectoryError(21, "Is a directory", file)
    detail = raw.stderr.decode("utf-8", "replace").strip()
    raise RuntimeError(f"file operation on {shlex.quote(file)} failed ({raw.returncode}): {detail}")
