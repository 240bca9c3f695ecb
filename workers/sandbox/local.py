"""The ``local`` driver: a private temp directory and subprocesses on this host.

NO ISOLATION: commands run with this process's privileges and see the whole filesystem and network.
It exists so that embedded mode works with nothing installed (trying things out, tests, demos).
Semantics match the docker driver because the same exec agent runs here as a local subprocess:
process groups, timeouts that kill the group, output caps, closed stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import sys
import tempfile
import uuid

import structlog

from orchestrator.util._sandbox import ExecResult, SandboxUnavailableError
from orchestrator.util._sandbox_config import LocalSandboxConfig

from ._channel import AGENT_PATH, AgentChannel, ChannelClosed
from ._driver import SandboxDriver, SandboxRequest
from ._environment import AgentSandboxEnvironment
from ._registry import SandboxRegistry, default_registry

log = structlog.get_logger("toolfleet.sandbox")


class LocalSandboxEnvironment(AgentSandboxEnvironment):
    def __init__(self, sandbox_id: str, root: str, output_cap: int, env: dict[str, str]) -> None:
        super().__init__(sandbox_id, output_cap, env)
        self.root = root
        self._procs: list[asyncio.subprocess.Process] = []

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None,
                   timeout: float | None = None) -> ExecResult:
        result = await super().exec(cmd, input=input, cwd=cwd, env=env, user=user, timeout=timeout)
        # As Inspect's local sandbox (a plain subprocess): a program that exists but cannot be
        # executed raises PermissionError instead of returning the shell's 126.
        if cmd and result.returncode == 126 and result.stderr == f"{cmd[0]}: Permission denied" and not result.stdout:
            raise PermissionError(13, "Permission denied", cmd[0])
        return result

    async def _open_channel(self, user: str | None) -> AgentChannel:
        kwargs: dict[str, object] = {}
        if user is not None and user != pwd.getpwuid(os.getuid()).pw_name:
            if os.geteuid() != 0:
                raise PermissionError(1, f"local sandbox cannot run commands as '{user}' (not running as root)")
            kwargs["user"] = user
            # The sandbox dir belongs to us; let the other user work in it.
            os.chmod(self.root, 0o777)  # noqa: S103 - the sandbox user is another uid
        env = {**os.environ, "HOME": self.root, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-u", str(AGENT_PATH),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=self.root,
            env=env,
            start_new_session=True,  # a Ctrl-C to the orchestrator must not reach sandbox commands
            limit=1 << 20,
            **kwargs,  # type: ignore[arg-type]  # user= and friends: the stubs' overloads take them one by one
        )
        self._procs.append(proc)
        assert proc.stdin is not None and proc.stdout is not None
        channel = AgentChannel(proc.stdout, proc.stdin, demux=False)
        try:
            await channel.hello()
        except (ChannelClosed, TimeoutError) as exc:
            await channel.aclose()
            raise ChannelClosed(f"local agent did not start: {exc}") from exc
        return channel

    async def aclose(self) -> None:
        await super().aclose()  # closes the agents' stdin: each kills what its commands left running
        for proc in self._procs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 2.0)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                try:
                    await asyncio.wait_for(proc.wait(), 5.0)
                except TimeoutError:
                    log.warning("sandbox.local_agent_stuck", sandbox=self.sandbox_id, pid=proc.pid)
        await asyncio.to_thread(shutil.rmtree, self.root, True)


class LocalSandboxDriver(SandboxDriver):
    def __init__(self, config: LocalSandboxConfig | None = None, registry: SandboxRegistry | None = None) -> None:
        self.config = config or LocalSandboxConfig()
        self.registry = registry or default_registry()
        self._envs: dict[str, LocalSandboxEnvironment] = {}

    async def create(self, spec: SandboxRequest | None = None) -> LocalSandboxEnvironment:
        spec = spec or SandboxRequest()
        sandbox_id = f"local-{uuid.uuid4().hex[:12]}"
        root = await asyncio.to_thread(tempfile.mkdtemp, prefix="toolfleet-", dir=self.config.root_dir)
        env = LocalSandboxEnvironment(sandbox_id, root, self.config.output_cap, spec.env)
        env.warm_spares = self.config.warm_spares
        try:
            await env._channel(None)  # start the agent now: fail at create, not at the first call
        except (ChannelClosed, OSError) as exc:
            await env.aclose()
            raise SandboxUnavailableError(f"could not start a local sandbox: {exc}") from exc
        self._envs[sandbox_id] = env
        self.registry.register(sandbox_id, env)
        return env

    async def destroy(self, env: AgentSandboxEnvironment) -> None:
        self._envs.pop(env.sandbox_id, None)
        self.registry.release(env.sandbox_id)
        await env.aclose()

    async def reap(self) -> int:
        return 0  # local sandboxes die with their process group and temp dir; nothing outlives us

    async def aclose(self) -> None:
        for env in list(self._envs.values()):
            await self.destroy(env)
