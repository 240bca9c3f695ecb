"""Record every exec (and file read/write) a tool makes in its sandbox, next to the sandbox.

``RecordingSandbox`` wraps the sample's ``SandboxEnvironment`` for the length of one call (or a
sample's setup, or embedded-mode scorer code) and hands each ``SandboxExec`` to a sink: the executor
collects them into the call's outcome, so they travel back with the tool result in both modes.

Cost per exec: two clock reads, a few string slices and one small model. Texts are cut head+tail to a
few KiB, and a call keeps at most ``MAX_SANDBOX_EXECS`` records (the rest are counted) and
``TEXT_BUDGET`` characters of texts, so a chatty tool grows its outcome by less than ~100 KiB.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from orchestrator.util._sandbox import ExecResult, SandboxEnvironment

__all__ = ["ExecList", "MAX_SANDBOX_EXECS", "RecordingSandbox", "SandboxExec", "cut", "unwrap"]

OUTPUT_CHARS = 4096  # per record: stderr then stdout (or a file's contents), head and tail
TEXT_CHARS = 1024  # per record: the command line, and stdin / contents written
MAX_SANDBOX_EXECS = 100
TEXT_BUDGET = 64 * 1024  # per call (or setup): texts kept over all its records
SPENT_CMD_CHARS = 256  # a record's command once the budget is spent


class SandboxExec(BaseModel):
    """One command (or file read/write) a tool ran in its sandbox, as recorded next to the sandbox.

    Part of the wire contract (``orchestrator._wire.CallOutcome`` carries a call's records back);
    defined beside the recorder that builds them, because the wire module sits above ``util``.

    Kept small on purpose: ``cmd``, ``input`` and ``output`` are cut (head and tail) to a few KiB and
    a call sends at most ``MAX_SANDBOX_EXECS`` of them. The host is the outcome's (not repeated).
    """

    action: Literal["exec", "read_file", "write_file"] = "exec"
    cmd: str | None = None  # the argv, shell-quoted
    file: str | None = None  # read_file / write_file
    input: str | None = None  # stdin, or the contents written (cut)
    result: int | None = None  # exit status (None: the command did not finish)
    output: str | None = None  # stderr then stdout, or the contents read (cut)
    truncated: bool = False  # cut here or capped at the source
    error: str | None = None  # why it did not finish (timeout, output limit, sandbox lost, ...)
    service: str | None = None  # which container of a multi-service sandbox (None: the default one)
    started: float = 0.0
    duration: float = 0.0


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` if it fits ``limit`` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}", True


def _text(value: Any, limit: int) -> tuple[str | None, bool]:
    if value is None:
        return None, False
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>", False
    return cut(str(value), limit)


class ExecList:
    """A bounded list of records (the sink the executor and the setup use): at most
    ``MAX_SANDBOX_EXECS`` records and ``TEXT_BUDGET`` characters of texts; past the budget a record
    keeps its command's head and its status, not its input or output."""

    __slots__ = ("items", "dropped", "_budget")

    def __init__(self) -> None:
        self.items: list[SandboxExec] = []
        self.dropped = 0
        self._budget = TEXT_BUDGET

    def __call__(self, record: SandboxExec) -> None:
        if len(self.items) >= MAX_SANDBOX_EXECS:
            self.dropped += 1
            return
        size = len(record.cmd or "") + len(record.input or "") + len(record.output or "")
        if size > self._budget:
            record.cmd = None if record.cmd is None else cut(record.cmd, SPENT_CMD_CHARS)[0]
            record.input = record.output = None
            record.truncated = True
            size = len(record.cmd or "")
        self._budget = max(0, self._budget - size)
        self.items.append(record)


def unwrap(env: SandboxEnvironment) -> SandboxEnvironment:
    """The environment under any recorders (so recorders never nest and state is the sandbox's own)."""
    while isinstance(env, RecordingSandbox):
        env = env.wrapped
    return env


class RecordingSandbox(SandboxEnvironment):
    """The sample's sandbox, recording each exec / read_file / write_file into ``sink``.

    Anything else (``state``, ``sandbox_id``, driver extras) is the wrapped environment's.
    """

    def __init__(self, env: SandboxEnvironment, sink: Callable[[SandboxExec], None],
                 service: str | None = None) -> None:
        self.wrapped = unwrap(env)
        self._sink = sink
        self._service = service  # a multi-service sandbox's container, named on each record

    def __getattr__(self, name: str) -> Any:  # only for names not found on the wrapper
        if name in ("wrapped", "_sink", "_service"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None,
                   timeout: float | None = None) -> ExecResult:
        started, t0 = time.time(), time.perf_counter()
        try:
            result = await self.wrapped.exec(cmd, input=input, cwd=cwd, env=env, user=user, timeout=timeout)
        except BaseException as exc:
            self._record("exec", started, t0, cmd=cmd, input=input, error=exc)
            raise
        output = f"{result.stderr}\n{result.stdout}" if result.stderr else result.stdout
        self._record("exec", started, t0, cmd=cmd, input=input, result=result.returncode, output=output,
                     truncated=result.truncated)
        return result

    async def read_file(self, file: str, text: bool = True) -> Any:
        started, t0 = time.time(), time.perf_counter()
        try:
            contents = await self.wrapped.read_file(file, text=text)  # type: ignore[call-overload]  # text is a runtime bool: both overloads
        except BaseException as exc:
            self._record("read_file", started, t0, file=file, error=exc)
            raise
        self._record("read_file", started, t0, file=file, result=0, output=contents)
        return contents

    async def write_file(self, file: str, contents: str | bytes) -> None:
        started, t0 = time.time(), time.perf_counter()
        try:
            await self.wrapped.write_file(file, contents)
        except BaseException as exc:
            self._record("write_file", started, t0, file=file, input=contents, error=exc)
            raise
        self._record("write_file", started, t0, file=file, input=contents, result=0)

    async def snapshot(self, keep: bool = False) -> Any:
        return await self.wrapped.snapshot(keep=keep)

    def _record(self, action: Any, started: float, t0: float, *, cmd: list[str] | None = None,
                file: str | None = None, input: Any = None, result: int | None = None, output: Any = None,
                truncated: bool = False, error: BaseException | None = None) -> None:
        duration = time.perf_counter() - t0
        try:
            line = None
            if cmd is not None:
                line, cut_cmd = cut(shlex.join(str(c) for c in cmd), TEXT_CHARS)
                truncated = truncated or cut_cmd
            stdin, cut_in = _text(input, TEXT_CHARS)
            if error is not None and output is None:
                partial = getattr(error, "truncated_output", None)  # a timeout's partial output
                output = partial if isinstance(partial, str) else None
            shown, cut_out = _text(output, OUTPUT_CHARS)
            why = None
            if error is not None:
                message = str(error)
                why = f"{type(error).__name__}: {message[:TEXT_CHARS]}" if message else type(error).__name__
            self._sink(SandboxExec(action=action, cmd=line, file=file, input=stdin, result=result, output=shown,
                                   truncated=truncated or cut_in or cut_out, error=why, service=self._service,
                                   started=started, duration=duration))
        except Exception:  # noqa: BLE001, S110 - recording must never change what the tool sees
            pass


def recorded_services(env: SandboxEnvironment, recorded: SandboxEnvironment,
                      sink: Callable[[SandboxExec], None]) -> dict[str, SandboxEnvironment] | None:
    """``sandbox(name)``'s map for a multi-service sandbox (None for one container), each recorded into ``sink``."""
    inner = unwrap(env)
    named = inner.named_sandboxes() if hasattr(inner, "named_sandboxes") else {}
    if not named:
        return None
    return {name: recorded if unwrap(box) is inner else RecordingSandbox(box, sink, service=name)
            for name, box in named.items()}
