"""The executing side's sandbox lifecycle: open a sample's sandbox from a wire ``SandboxSpec``.

One driver per distinct sandbox config lives for the life of the process (so docker pools and
reapers are shared by every sample using that config); sandboxes are found by handle in the
process-local registry. Embedded mode calls this in the orchestrator process; a worker calls it
from its ``open_sandbox`` / ``close_sandbox`` tasks.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from orchestrator._wire import SandboxSpec
from orchestrator.util._sandbox import SandboxUnavailableError

from ._sandbox_recorder import ExecList, RecordingSandbox
from .sandbox import _registry as registry
from orchestrator.util._sandbox_config import DockerSandboxConfig
from orchestrator.util._sandbox_parse import sandbox_config

from .sandbox._build import build_driver
from .sandbox._driver import SandboxDriver, SandboxRequest

log = structlog.get_logger("toolfleet.sandbox")

_drivers: dict[str, SandboxDriver] = {}
_owners: dict[str, SandboxDriver] = {}
_lock = asyncio.Lock()
SETUP_TIMEOUT_S = 600.0


class SandboxSetupError(RuntimeError):
    """A sample's files or setup script could not be put in place."""


async def _driver_for(config_json: dict) -> SandboxDriver:
    config = sandbox_config(config_json)
    key = config.model_dump_json()
    async with _lock:
        driver = _drivers.get(key)
        if driver is None:
            driver = build_driver(config)
            _drivers[key] = driver
        return driver


async def open_sandbox(spec: SandboxSpec) -> str:
    """Create the sample's sandbox, write its files, run its setup; return its handle."""
    handle, _ = await open_sandbox_recorded(spec)
    return handle


async def open_sandbox_recorded(spec: SandboxSpec) -> tuple[str, ExecList]:
    """``open_sandbox``, also returning the file writes and setup run as recorded execs.

    On failure the execs so far ride on the raised exception as ``sandbox_execs`` (a failing setup's
    output is what the transcript most needs).
    """
    driver = await _driver_for(spec.config)
    env = await driver.create(SandboxRequest(eval_id=spec.eval_id or "", sample_id=spec.sample_id or ""))
    handle: str = env.sandbox_id
    _owners[handle] = driver
    execs = ExecList()
    box = RecordingSandbox(env, execs)
    try:
        for path, contents in spec.files.items():
            await box.write_file(path, contents)
        if spec.setup:
            result = await box.exec(["sh", "-c", spec.setup], timeout=SETUP_TIMEOUT_S)
            if not result.success:
                raise SandboxSetupError(
                    f"Setup for sample {spec.sample_id!r} exited with {result.returncode}: "
                    f"{(result.stderr or result.stdout).strip()[-500:]}"
                )
    except BaseException as exc:
        with contextlib.suppress(Exception):
            exc.sandbox_execs = execs  # type: ignore[attr-defined]
        await close_sandbox(handle)
        raise
    log.debug("sandbox.opened", handle=handle, sample=spec.sample_id, driver=spec.config.get("type"))
    return handle, execs


async def close_sandbox(handle: str) -> None:
    """Destroy a sandbox by handle; a sandbox that is already gone is not an error."""
    driver = _owners.pop(handle, None)
    try:
        env = registry.get(handle)
    except SandboxUnavailableError:
        return
    if driver is None:  # opened by a driver we do not track: just forget it
        registry.release(handle)
        return
    await driver.destroy(env)


async def reap() -> int:
    """Remove containers a dead incarnation of this host left behind (worker start)."""
    try:
        driver = await _driver_for(DockerSandboxConfig().model_dump())
        return await driver.reap()
    except Exception as exc:  # no Docker here: nothing of ours can be leaked there either
        log.info("sandbox.reap_skipped", reason=str(exc))
        return 0


async def close_all() -> None:
    """Destroy every sandbox this process owns and release the drivers (shutdown)."""
    for handle in list(_owners):
        try:
            await close_sandbox(handle)
        except Exception as exc:  # keep closing the rest
            log.warning("sandbox.close_failed", handle=handle, error=str(exc))
    for driver in list(_drivers.values()):
        await driver.aclose()
    _drivers.clear()


