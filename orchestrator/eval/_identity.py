"""An eval's identity: what must match for a re-run to resume a log rather than start a new one.

Identity = task (name, file, a hash of the file's bytes, args), model (name, args), generation config,
sandbox spec, solver and scorers, the sample selection (limit, sample ids) and epochs/reducer. Two runs
with the same identity are the same experiment: finished samples are kept. Anything else that changes
the result (a fixed scorer in the task file, another temperature, other model args) starts a new log.
Run-time knobs (max_samples, max_sandboxes, broker, display) are not part of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

SECRET_WORDS = ("key", "token", "secret", "password", "auth")


class EvalIdentity(BaseModel):
    task: str
    task_file: str | None = None
    task_file_hash: str | None = None
    task_args: dict[str, Any] = Field(default_factory=dict)
    model: str
    model_args: dict[str, Any] = Field(default_factory=dict)
    generate_config: dict[str, Any] = Field(default_factory=dict)
    sandbox: dict[str, Any] | None = None
    solver: str | None = None
    scorers: list[str] = Field(default_factory=list)
    limit: int | None = None
    sample_ids: list[str] | None = None
    epochs: int = 1
    epochs_reducer: list[str] | None = None


def file_hash(path: str | None) -> str | None:
    if not path or not Path(path).is_file():
        return None
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recordable_args(args: dict[str, Any]) -> dict[str, Any]:
    """Model args as the log records them: secrets redacted, non-JSON values by name."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if any(word in key.lower() for word in SECRET_WORDS) and value is not None:
            out[key] = "<redacted>"
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, (list, tuple, dict)):
            out[key] = _jsonish(value)
        else:
            out[key] = f"<{getattr(value, '__qualname__', None) or type(value).__name__}>"
    return out


def _jsonish(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonish(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonish(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


def identity_differences(recorded: EvalIdentity | None, current: EvalIdentity) -> list[str]:
    """Field names whose values differ (``["identity"]`` when the log recorded none)."""
    if recorded is None:
        return ["identity (the log predates identity records)"]
    a, b = recorded.model_dump(mode="json"), current.model_dump(mode="json")
    return [name for name in b if a.get(name) != b[name]]
