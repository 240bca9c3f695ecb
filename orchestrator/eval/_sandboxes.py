"""A task's sandbox specs, each parsed once into the typed config every later step receives.

The task's spec and each sample's override (``Sample.sandbox``) are parsed where the task is loaded
(compose files relative to the task file); preflight reads what they need from the same parsed
values, and the runner sends each sample's config as parsed (its JSON form, dumped once per spec).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.util._sandbox_config import DockerSandboxConfig, LocalSandboxConfig
from orchestrator.util._sandbox_parse import sandbox_config

__all__ = ["SandboxConfigs"]

Config = LocalSandboxConfig | DockerSandboxConfig


class SandboxConfigs:
    """``task``: the task's own config (None: no sandbox); ``parse`` raises ``ValueError`` (pydantic's
    ``ValidationError`` included) for a spec that does not parse."""

    def __init__(self, task_spec: Any, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self._parsed: dict[str, tuple[Config, dict[str, Any]]] = {}
        self.task_spec = task_spec
        self.task: Config | None = self.parse(task_spec) if task_spec is not None else None

    def _entry(self, spec: Any) -> tuple[Config, dict[str, Any]]:
        key = repr(spec)
        entry = self._parsed.get(key)
        if entry is None:
            config = sandbox_config(spec, self.base_dir)
            entry = self._parsed[key] = (config, config.model_dump(mode="json"))
        return entry

    def parse(self, spec: Any) -> Config:
        return self._entry(spec)[0]

    def wire(self, spec: Any) -> dict[str, Any]:
        """The config as it travels (JSON), for a spec already parsed or parsed now."""
        return self._entry(spec)[1]

    def spec_for(self, sample: Any) -> Any:
        """The spec a sample opens: its own, else the task's (None: no sandbox)."""
        return sample.sandbox if sample.sandbox is not None else self.task_spec
