"""Parse what a task or sample names as its sandbox into one typed config, once.

``"local"``, ``"docker"``, a dict with a ``type`` tag, a config model, or Inspect's ``(type,
config)`` pair whose config may be a compose file (read by ``_compose``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ._compose import read_compose
from ._sandbox_config import DockerSandboxConfig, LocalSandboxConfig, SandboxConfig

__all__ = ["sandbox_config"]

_ADAPTER: TypeAdapter[Any] = TypeAdapter(SandboxConfig)


def sandbox_config(value: str | dict[str, Any] | BaseModel | tuple[str, Any],
                   base_dir: str | Path | None = None) -> LocalSandboxConfig | DockerSandboxConfig:
    """Parse ``"local"``, ``"docker"``, a dict with a ``type`` tag, a config model, or Inspect's
    ``(type, config)`` pair: ``("docker", "compose.yaml")`` reads that compose file (relative to
    ``base_dir``, the task file's directory, else the current one); ``("docker", {...})`` is a dict."""
    if isinstance(value, (LocalSandboxConfig, DockerSandboxConfig)):
        return value
    from ._snapshot import Snapshot

    if isinstance(value, Snapshot):  # Sample(sandbox=snapshot): start from a checkpoint
        value = value.sandbox_config()
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or not isinstance(value[0], str):
            raise ValueError("a sandbox pair is (type, config), e.g. ('docker', 'compose.yaml')")
        kind, config = value
        if isinstance(config, (str, Path)):
            if kind != "docker":
                raise ValueError(f"a compose file configures a 'docker' sandbox, not {kind!r}")
            return read_compose(config, base_dir)
        value = {**(config.model_dump() if isinstance(config, BaseModel) else dict(config or {})), "type": kind}
    if isinstance(value, str):
        value = {"type": value}
    elif isinstance(value, BaseModel):
        value = value.model_dump()
    parsed: SandboxConfig = _ADAPTER.validate_python(value)
    return parsed
