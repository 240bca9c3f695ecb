"""What a Harbor verifier leaves in ``/logs/verifier``: its rewards and its files (pure; table-tested).

Rewards, as Harbor 0.25 reads them: ``reward.json`` wins when it exists (an object whose every value is a
number; booleans count as 0 and 1, as in Python), else ``reward.txt`` (one number, ``{"reward": x}``);
neither is "no reward file", an empty one "empty", anything else "does not parse". Every value must be
finite and at most ``MAX_REWARD`` in size (NaN, Infinity and ``1e308`` never reach the metrics), and a
report has at most ``MAX_REWARDS`` names of at most ``MAX_NAME_CHARS`` characters: the names are written
by code in the sandbox and shown on the operator's terminal (escaped there).

Files: the collector (``COLLECT``, run in the sandbox as the verifier's user) prints each regular file
under ``/logs/verifier`` (``test-stdout.txt``, ``ctrf.json``, the reward files, whatever ``test.sh`` left)
as a header line and its base64 contents, bounded per file (head and tail kept) and in total; links are
not followed. ``parse_collected`` turns that into ``VerifierFile``s and notes of what was cut.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator._errors import ToolfleetError

__all__ = ["COLLECT", "Collected", "RewardError", "VerifierFile", "parse_collected", "parse_rewards"]

VERIFIER_DIR = "/logs/verifier"
MAX_REWARD = 1e12
MAX_REWARDS = 64
MAX_NAME_CHARS = 128
FILE_HALF = 48 * 1024  # a file over 2 x this keeps its first and last FILE_HALF bytes
TOTAL_BYTES = 256 * 1024  # every file's kept bytes together (base64 and headers stay well under a call's result)
MAX_FILES = 64

# POSIX sh with coreutils or busybox (no python3 needed). Per file: "F <base64 name> <size> <head> <tail>"
# then one line of base64 (head bytes, then tail bytes); "X <count>" when files were left out.
COLLECT = f"""cd {VERIFIER_DIR} 2>/dev/null || exit 0
n=0; left={TOTAL_BYTES}; skipped=0
{{ for r in reward.json reward.txt; do if [ -f "$r" ] && [ ! -L "$r" ]; then echo "$r"; fi; done
  find . -type f 2>/dev/null | sed 's|^\\./||' | grep -v -x -e reward.json -e reward.txt; }} | {{
while IFS= read -r f; do
  n=$((n+1)); if [ "$n" -gt {MAX_FILES} ]; then skipped=$((skipped+1)); continue; fi
  size=$(wc -c < "$f" | tr -d ' ') || continue
  head=$size; tail=0
  if [ "$size" -gt $(({FILE_HALF} * 2)) ]; then head={FILE_HALF}; tail={FILE_HALF}; fi
  if [ $((head + tail)) -gt "$left" ]; then head=$left; tail=0; fi
  left=$((left - head - tail))
  printf 'F %s %s %s %s\\n' "$(printf '%s' "$f" | base64 | tr -d '\\n')" "$size" "$head" "$tail"
  {{ head -c "$head" "./$f"; if [ "$tail" -gt 0 ]; then tail -c "$tail" "./$f"; fi; }} | base64 | tr -d '\\n'
  echo
done
if [ "$skipped" -gt 0 ]; then echo "X $skipped"; fi
}}
"""


class RewardError(ToolfleetError, ValueError):
    """The verifier's reward file does not say a reward."""


def _number(name: str, value: Any, source: str) -> float:
    if not isinstance(value, (int, float)):
        raise RewardError(f"{source}: reward {name[:MAX_NAME_CHARS]!r} is not a number")
    number = float(value)
    if not math.isfinite(number) or abs(number) > MAX_REWARD:
        raise RewardError(f"{source}: reward {name[:MAX_NAME_CHARS]!r} is not a finite number of at most "
                          f"{MAX_REWARD:g} in size")
    return number


def parse_rewards(reward_json: str | None, reward_txt: str | None) -> dict[str, float]:
    """Harbor's rule (see the module doc): ``reward.json`` when present, else ``reward.txt``."""
    if reward_json is not None:
        if not reward_json:
            raise RewardError("reward.json is empty")
        try:
            parsed: Any = json.loads(reward_json)
        except ValueError as exc:
            raise RewardError(f"reward.json is not JSON ({str(exc)[:200]})") from None
        if not isinstance(parsed, dict):
            raise RewardError("reward.json must be a JSON object of numbers")
        if not parsed:
            raise RewardError("reward.json holds no reward")
        if len(parsed) > MAX_REWARDS:
            raise RewardError(f"reward.json holds more than {MAX_REWARDS} rewards")
        long = next((k for k in parsed if len(k) > MAX_NAME_CHARS), None)
        if long is not None:
            raise RewardError(f"reward.json: a reward name is longer than {MAX_NAME_CHARS} characters")
        return {str(k): _number(str(k), v, "reward.json") for k, v in parsed.items()}
    if reward_txt is None:
        raise RewardError(f"no reward file ({VERIFIER_DIR}/reward.txt or reward.json)")
    if not reward_txt:
        raise RewardError("reward.txt is empty")
    try:
        value = float(reward_txt)
    except ValueError:
        raise RewardError(f"reward.txt is not a number: {reward_txt.strip()[:80]!r}") from None
    return {"reward": _number("reward", value, "reward.txt")}


@dataclass(frozen=True)
class VerifierFile:
    """One file of ``/logs/verifier``: its name, size, and the bytes kept of it (all, or head and tail)."""

    name: str
    size: int
    head: bytes
    tail: bytes = b""

    @property
    def whole(self) -> bool:
        return len(self.head) + len(self.tail) >= self.size

    def text(self) -> str:
        """The kept bytes as text (UTF-8, undecodable bytes replaced), with a marker where a cut was."""
        body = self.head.decode("utf-8", "replace")
        if not self.whole:
            cut = self.size - len(self.head) - len(self.tail)
            body += f"\n[... {cut:,} bytes not kept ...]\n" + self.tail.decode("utf-8", "replace")
        return body

    def log_entry(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "text": self.text(), "whole": self.whole}


@dataclass
class Collected:
    files: dict[str, VerifierFile] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def content(self, name: str) -> str | None:
        """A whole file's text (None: absent); ``RewardError`` when it was too large to keep whole."""
        found = self.files.get(name)
        if found is None:
            return None
        if not found.whole:
            raise RewardError(f"{name} is larger than {FILE_HALF * 2:,} bytes")
        return found.head.decode("utf-8", "replace")


def parse_collected(output: str) -> Collected:
    """``COLLECT``'s output as files and notes (a malformed line ends the listing with a note)."""
    out = Collected()
    lines = output.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line:
            continue
        parts = line.split(" ")
        if parts[0] == "X" and len(parts) == 2 and parts[1].isdigit():
            out.notes.append(f"{parts[1]} more file(s) not kept (at most {MAX_FILES})")
            continue
        try:
            if parts[0] != "F" or len(parts) != 5:
                raise ValueError(line[:80])
            name = base64.b64decode(parts[1], validate=True).decode("utf-8", "replace")
            size, head, tail = int(parts[2]), int(parts[3]), int(parts[4])
            data = base64.b64decode(lines[index].strip(), validate=True) if index < len(lines) else b""
            index += 1
        except (ValueError, binascii.Error):
            out.notes.append("the listing of /logs/verifier was cut short")
            break
        kept = VerifierFile(name, size, data[:head], data[head:head + tail])
        out.files[name] = kept
        if not kept.whole:
            out.notes.append(f"{name[:200]}: {size:,} bytes, kept {len(kept.head) + len(kept.tail):,} "
                             f"(first and last)")
    return out
