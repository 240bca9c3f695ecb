"""Bounds on what a message may ask of a sandbox, by construction (pure; table-tested).

``workers._admission.admit_sandbox`` asks this module two things:

* **users** (``parse_user``, ``user_refusal``): a user spec is parsed the way Docker and runc read it
  (``NAME``, ``UID``, ``NAME:GROUP``, ``UID:GID``; a number may carry a sign or leading zeros:
  ``"00"``, ``"+0"`` and ``"1000:00"`` are uid or gid 0) and refused when either side is 0 or
  ``root``, unless the worker allows root. A name that is not ``root`` is admitted here and, on a
  worker, resolved to numbers inside the sandbox before any command runs as it
  (``workers._exec_user``), so a name that resolves to 0 is refused too.
* **numbers** (``LIMITS``, ``bounded``): every numeric field a message may set has a positive lower
  bound and an upper bound. Below the lower bound is refused (``mem_limit "0"``, ``cpus 1e-12``,
  ``pids_limit -1`` would mean "unlimited" or a busy loop); above the upper bound is clamped to the
  worker's cap. NaN and infinities are refused.

* **a call's numbers** (``call_timeout``, ``result_bytes``): its ``timeout`` within the worker's
  ``max_call_seconds`` (0, negative or NaN: the worker's default), its ``max_result_bytes`` within
  [1 KiB, 16 MiB].

The lower bounds are what a working sandbox needs (the exec agent, a shell and a few tools), so a
sandbox that a message could shrink below them would only fail in confusing ways.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator._errors import ToolfleetError

__all__ = ["LIMITS", "SERVICE_LIMITS", "AdmissionRefused", "Bound", "ParsedUser", "bounded", "call_timeout",
           "parse_bytes",
           "parse_user", "result_bytes", "user_refusal"]

MiB = 1024 * 1024
_NUMBER = re.compile(r"[+-]?\d+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")  # POSIX-ish login/group names, as useradd takes them
MAX_ID = 2**31 - 2  # 2**32-1 is (uid_t)-1 ("no change"); ids past 2**31 confuse too much tooling
_UNITS = {"": 1, "b": 1, "k": 1024, "m": MiB, "g": 1024 * MiB, "t": 1024 * 1024 * MiB}


class AdmissionRefused(ToolfleetError, ValueError):
    """A message asked for something this worker's admission rules do not allow."""


def parse_bytes(value: str | int) -> int:
    """Docker's memory notation: ``512m``, ``1g``, ``1073741824``."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", str(value).lower())
    if match is None:
        raise AdmissionRefused(f"Unreadable memory size {value!r}.")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True)
class ParsedUser:
    """A user spec read as Docker reads it: each side a number or a name (group None: the user's own)."""

    user: int | str
    group: int | str | None = None

    @property
    def numeric(self) -> bool:
        return isinstance(self.user, int) and (self.group is None or isinstance(self.group, int))


def _part(text: str) -> int | str:
    if _NUMBER.fullmatch(text):
        return int(text)  # "00", "+0", "-0" -> 0, as strconv.Atoi reads them in runc
    if _NAME.fullmatch(text):
        return text
    raise ValueError(f"{text!r} is neither a number nor a user or group name")


def parse_user(spec: str) -> ParsedUser:
    """``"1000:1000"`` -> ParsedUser(1000, 1000); ``"sandbox"`` -> ParsedUser("sandbox"); ValueError if unreadable."""
    if not isinstance(spec, str):
        raise ValueError("a user must be a string")
    text = spec.strip()
    if not text:
        raise ValueError("an empty user")
    user, colon, group = text.partition(":")
    if colon and not group:
        raise ValueError(f"{spec!r} has an empty group")
    return ParsedUser(_part(user), _part(group) if colon else None)


def user_refusal(spec: str, allow_root: bool = False) -> str | None:
    """Why a message may not run as ``spec`` (None: admitted; names are resolved later, see above)."""
    try:
        parsed = parse_user(spec)
    except ValueError as exc:
        return str(exc)
    for side, value in (("user", parsed.user), ("group", parsed.group)):
        if isinstance(value, int) and not 0 <= value <= MAX_ID:
            return f"{side} id {value} is out of range (0..{MAX_ID})"
    if allow_root:
        return None
    if parsed.user in (0, "root") or parsed.group in (0, "root"):
        return "a message cannot ask for the root user or group (uid or gid 0)"
    return None


@dataclass(frozen=True)
class Bound:
    """A numeric field's admitted range: below ``low`` is refused, above ``high(rules)`` clamped."""

    low: float
    high: Callable[[Any], float]
    kind: type = float  # int or float: the type the admitted value keeps
    memory: bool = False  # a Docker memory size ("512m"): compared in bytes, kept as the caller wrote it


def _mem(rules: Any) -> float:
    return float(parse_bytes(rules.max_memory))


# Every numeric field of a sandbox config a message may set. A numeric field not listed here keeps
# its default (``_admission`` refuses any other non-default field): a new knob is never open by accident.
LIMITS: dict[str, Bound] = {
    "mem_limit": Bound(6 * MiB, _mem, memory=True),  # Docker's own minimum is 6 MiB; "0" means unlimited
    "memswap_limit": Bound(6 * MiB, _mem, memory=True),  # "-1" (unlimited swap) does not parse
    "cpus": Bound(0.01, lambda p: p.max_cpus),
    "pids_limit": Bound(32, lambda p: p.max_pids, int),  # 0 and -1 mean unlimited to Docker
    "output_cap": Bound(1024, lambda p: p.max_output_cap, int),
    "pool_size": Bound(0, lambda p: p.max_pool_size, int),  # 0: no warm spares (a valid ask)
    "max_sandboxes": Bound(1, lambda p: p.max_sandboxes, int),
    "ttl": Bound(60.0, lambda p: p.max_ttl),
    "reap_interval": Bound(5.0, lambda p: 3600.0),  # 1e-6 kept the worker and dockerd busy
    "acquire_timeout": Bound(1.0, lambda p: 3600.0),
    "warm_spares": Bound(0, lambda p: 16, int),
}
SERVICE_LIMITS = {name: LIMITS[name] for name in ("mem_limit", "cpus", "pids_limit")}


def bounded(rules: Any, field: str, value: Any, bound: Bound) -> tuple[Any, str | None]:
    """``(admitted value, None)``, or ``(None, why)`` when the value is refused. Pure."""
    if value is None:
        return None, None  # "the default" (e.g. memswap_limit: same as mem_limit; pool_size: the driver's)
    if bound.memory:
        try:
            size = float(parse_bytes(value))
        except AdmissionRefused as exc:
            return None, str(exc)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{value!r} is not a number"
    else:
        size = float(value)
    if not math.isfinite(size):
        return None, f"{value!r} is not a finite number"
    if size < bound.low:
        low = f"{int(bound.low // MiB)}m" if bound.memory else f"{bound.low:g}"
        return None, f"{value!r} is below the minimum {low}"
    high = bound.high(rules)
    if size > high:
        return (rules.max_memory if bound.memory else bound.kind(high)), None
    return (value if bound.memory else bound.kind(value)), None


# --- a call's own numbers ---------------------------------------------------------------------------

MIN_RESULT_BYTES = 1024
MAX_RESULT_BYTES = 16 * 1024 * 1024  # the wire default: a message may lower it, never raise it


def call_timeout(value: Any, cap: float) -> float | None:
    """A call's ``timeout`` as a worker runs it: a finite positive number up to ``cap`` (the worker's
    ``max_call_seconds``); anything else (0, negative, NaN, a string) is None — the worker's default."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(min(value, cap))


def result_bytes(value: Any) -> int:
    """A call's ``max_result_bytes``, kept within [1 KiB, 16 MiB]."""
    if isinstance(value, bool) or not isinstance(value, int):
        return MAX_RESULT_BYTES
    return max(MIN_RESULT_BYTES, min(value, MAX_RESULT_BYTES))
