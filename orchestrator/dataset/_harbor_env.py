"""``${VAR}`` in a Harbor task: which of the orchestrator's variables a task may read (pure; table-tested).

A task directory is a third party's data, and what its templates read lands in the sandbox, the eval log
and the image history (build arguments). Harbor fills them from the whole host environment; toolfleet
fills them only from:

* Harbor's own variables (``CPUS``, ``MEMORY``, ``TEST_DIR``, the ``ENV_*_PATH`` log directories), which
  describe the task itself;
* in ``environment/docker-compose.yaml``, the task's own ``[environment.env]`` (resolved first), as Harbor
  hands it to compose;
* the names the operator passes: ``--task-env NAME`` (repeatable; a shell-style pattern such as ``TB_*``
  passes every name it matches).

``TOOLFLEET_*`` and credential-looking names (``KEY``, ``SECRET``, ``TOKEN``, ``PASSWORD``, ``CREDENTIAL``,
``AUTH``, ``PASSWD``, ``PRIVATE`` in the name) are never passed: ``--task-env`` refuses them, and a task
whose template names one is refused at load, in one line. A template naming a variable that is set here
but not passed is refused too (the line says which ``--task-env`` would pass it), unless it has a default,
which is then used. A variable that is not set here is unset for the task.

The forms are Harbor's: in ``task.toml`` env tables only a whole value ``${VAR}`` or ``${VAR:-default}`` is a
template (unset without a default is an error, as in Harbor); in the compose file, compose's forms anywhere
in a string value (``$VAR``, ``${VAR}``, ``${VAR:-d}``, ``${VAR-d}``, ``${VAR:?message}``, ``${VAR?message}``,
``${VAR:+alt}``, ``${VAR+alt}``, ``$$`` for a dollar sign; unset is empty, as in compose).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

from orchestrator._errors import ToolfleetError

__all__ = ["TaskEnv", "TaskEnvError", "interpolate", "name_refusal", "resolve_whole_values"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATTERN = re.compile(r"[A-Za-z0-9_*?]+")
_SENSITIVE = re.compile(r"KEY|SECRET|TOKEN(?!S)|PASSWORD|PASSWD|CREDENTIAL|AUTH|PRIVATE", re.IGNORECASE)
_WHOLE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}", re.DOTALL)  # Harbor's task.toml form (fullmatch)
# Compose's forms: $$, ${NAME<op>arg} with op one of :- - :? ? :+ +, ${NAME}, $NAME.
_COMPOSE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
MAX_VALUE_CHARS = 64 * 1024  # one resolved value (an environment variable or a build argument)


class TaskEnvError(ToolfleetError, ValueError):
    """A template a task may not fill, or an operator's name that is never passed (one line)."""


def name_refusal(name: str) -> str | None:
    """Why ``name`` is never passed to a task (None: it may be)."""
    if name.upper().startswith("TOOLFLEET_"):
        return "toolfleet never passes its own TOOLFLEET_* variables to a task"
    if _SENSITIVE.search(name):
        return "toolfleet never passes credential-looking variables (KEY, SECRET, TOKEN, PASSWORD, AUTH, ...) to a task"
    return None


class TaskEnv:
    """The host variables a task's templates may read: the operator's names (or patterns) over ``environ``."""

    def __init__(self, names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        self.patterns = tuple(dict.fromkeys(names))
        for pattern in self.patterns:
            if not _PATTERN.fullmatch(pattern):
                raise TaskEnvError(f"--task-env {pattern!r}: a variable name or a pattern of letters, digits, '_', "
                                   "'*' and '?'")
            if not any(c in pattern for c in "*?"):
                why = name_refusal(pattern)
                if why is not None:
                    raise TaskEnvError(f"--task-env {pattern}: {why}")
        self.environ: Mapping[str, str] = environ if environ is not None else {}

    def passes(self, name: str) -> bool:
        return name_refusal(name) is None and any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def lookup(self, name: str, has_default: bool, where: str) -> str | None:
        """The host's value for ``name`` (None: unset for the task), or ``TaskEnvError`` (see module doc)."""
        why = name_refusal(name)
        if why is not None:
            raise TaskEnvError(f"{where} refers to ${{{name}}}: {why}")
        if self.passes(name):
            value = self.environ.get(name)
            if value is not None and len(value) > MAX_VALUE_CHARS:
                raise TaskEnvError(f"{where}: ${{{name}}} is longer than {MAX_VALUE_CHARS:,} characters")
            return value
        if name in self.environ and not has_default:
            raise TaskEnvError(f"{where} refers to ${{{name}}}, which is set here but not passed to tasks: "
                               f"pass it with --task-env {name}")
        return None


def resolve_whole_values(values: Mapping[str, str], env: TaskEnv, where: str) -> dict[str, str]:
    """A ``task.toml`` env table with Harbor's whole-value templates filled (see module doc)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        match = _WHOLE.fullmatch(value)
        if match is None:
            out[key] = value
            continue
        name, default = match.group(1), match.group(2)
        if not _NAME.fullmatch(name):
            raise TaskEnvError(f"{where}.{key}: ${{{name[:40]}}} is not a variable name")
        found = env.lookup(name, default is not None, f"{where}.{key}")
        if found is None and default is None:
            raise TaskEnvError(f"{where}.{key}: ${{{name}}} is not set here (and has no default)")
        out[key] = found if found is not None else str(default)
    return out


def interpolate(text: str, variables: Mapping[str, str], env: TaskEnv, where: str) -> str:
    """One compose string with compose's forms filled: ``variables`` (Harbor's own and the task's env)
    first, then what ``env`` passes (see module doc)."""

    def fill(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        name = match.group(2) or match.group(5)
        op, arg = match.group(3), match.group(4) or ""
        value = variables.get(name)
        if value is None:
            value = env.lookup(name, op is not None and op.lstrip(":") in "-+", where)
        empty_counts = op is not None and op.startswith(":")
        missing = value is None or (empty_counts and value == "")
        if op is None:
            return value or ""
        kind = op.lstrip(":")
        if kind == "-":
            return arg if missing else str(value)
        if kind == "+":
            return "" if missing else arg
        if missing:  # '?': required
            raise TaskEnvError(f"{where}: ${{{name}}} is required: {arg or 'not set'}")
        return str(value)

    return _COMPOSE.sub(fill, text)
