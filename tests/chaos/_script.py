"""Each chaos sample's script: the model's turns and the side effects they must leave (pure, table-tested).

A sample's script is drawn from ``random.Random(f"{seed}:{sample_id}")``, so the embedded reference run,
every Celery run and a batch provider's stand-in all replay the same turns. Every call that runs appends
one line naming it to ``chaos.log`` in the sample's sandbox (relative: the sandbox's working directory),
and prints something derived from that name only, so a tool message never depends on the order parallel
calls ran in. What a call may look like:

* ``bash`` / ``python`` (parallel-safe, so consecutive ones share a stage), some sleeping a little first so
  a fault lands while calls run;
* ``note`` (serial: a barrier between stages; task code the workers import);
* a ``bash`` call the approver rejects (``# deny``: it never runs, no line) or modifies (``# modify``: the
  line gets an ``m``), and ``python`` calls a reviewer looks at after they ran.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LOG = "chaos.log"
DENY, MODIFY = "# deny", "# modify"


@dataclass(frozen=True)
class Call:
    id: str
    function: str  # bash | python | note
    arguments: dict[str, str]
    line: str | None  # the line it appends when it runs (None: the approver rejects it)


def _bash(line: str, sleep: str, mark: str = "") -> dict[str, str]:
    return {"cmd": f"{sleep}printf '%s\\n' {line} >> {LOG} && echo bash-{line}{' ' + mark if mark else ''}"}


def _python(line: str, sleep: float) -> dict[str, str]:
    pause = f"import time; time.sleep({sleep})\n" if sleep else ""
    return {"code": f"{pause}open({LOG!r}, 'a').write({line + chr(10)!r})\nprint('py-{line}')"}


def script(sample_id: str, seed: int) -> list[list[Call]]:
    """The sample's turns (each the calls of one assistant message, in declared order)."""
    rng = random.Random(f"{seed}:{sample_id}")
    turns: list[list[Call]] = []
    for t in range(1, rng.randint(2, 4) + 1):
        calls = []
        for k in range(1, rng.randint(1, 4) + 1):
            line = f"{sample_id}.{t}.{k}"
            kind = rng.choices(["bash", "python", "note", "deny", "modify"], [45, 25, 15, 7, 8])[0]
            pause = rng.choice([0.0, 0.0, 0.2, 0.5])
            sleep = f"sleep {pause:g}; " if pause else ""
            cid = f"call-{line}"
            if kind == "bash":
                calls.append(Call(cid, "bash", _bash(line, sleep), line))
            elif kind == "python":
                calls.append(Call(cid, "python", _python(line, pause), line))
            elif kind == "note":
                calls.append(Call(cid, "note", {"line": line}, line))
            elif kind == "deny":
                calls.append(Call(cid, "bash", _bash(line, sleep, DENY), None))
            else:
                calls.append(Call(cid, "bash", _bash(line, sleep, MODIFY), line + "m"))
        turns.append(calls)
    return turns


def modified(cmd: str) -> str:
    """What the approver runs instead of a ``# modify`` command: its line and output carry an ``m``."""
    body = cmd.replace(" " + MODIFY, "")
    line = body.rsplit("echo bash-", 1)[1]
    return body.replace(f" {line} >>", f" {line}m >>").replace(f"echo bash-{line}", f"echo bash-{line}m")


def expected_lines(turns: list[list[Call]]) -> list[str]:
    """The lines a sample's sandbox must hold once its script ran: one per call that runs, each once."""
    return sorted(c.line for turn in turns for c in turn if c.line is not None)


def line_faults(expected: list[str], found: list[str]) -> dict[str, int]:
    """``missing`` expected lines, ``duplicated`` extra copies of a line, ``foreign`` lines no call of the
    script writes. Pure."""
    counts: dict[str, int] = {}
    for line in found:
        counts[line] = counts.get(line, 0) + 1
    want = set(expected)
    return {"missing": sum(1 for line in want if line not in counts),
            "duplicated": sum(n - 1 for n in counts.values() if n > 1),
            "foreign": sum(n for line, n in counts.items() if line not in want)}
