"""What a batch run records in the eval log, and how a resumed run finds what it already paid for.

Before a batch is sent, one ``batch`` line (``event: "intent"``) names the submission (``intent``, a tag
the provider keeps with the batch where it can) and, per request, its ``custom_id``, the sample and epoch
it belongs to, the conversation turn, and ``key`` — a hash of the request body. Once the provider accepted
it, an ``event: "submit"`` line names the batch (and the same requests and ``intent``). An ended batch adds
an ``event: "end"`` line with its final state.

A run killed between the provider's accepting a batch and the ``submit`` line reaching the disk leaves an
intent without its submit: a resumed run asks the provider for the batch that submission created
(``BatchBackend.find``: by its tag, or by its custom ids) and collects it, or sends the requests anew only
when the provider has no such batch. So a batch is never paid for twice.

A resumed eval re-runs its unfinished samples from the start. When such a sample makes a request whose
(model, sample, epoch, key) a previous run submitted, the request is not sent again: it attaches to the
recorded batch and takes that batch's result (collected now if the batch ended meanwhile). A sample that
made the same request twice (a retry after an error) replays the recorded submissions in order. Batches
that ended failed, expired or cancelled are left out: their requests would only fail again.

Pure: built from the log's records, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

_DEAD_STATES = ("failed", "expired", "cancelled")


def request_key(body: dict[str, Any]) -> str:
    """A stable hash of a request body (same request, same key, in any process)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def conversation_turn(body: dict[str, Any]) -> int:
    """Which model turn of its conversation a request is: assistant messages already in it, plus one."""
    messages = body.get("messages") or []
    return 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


@dataclass(frozen=True)
class RecordedRequest:
    batch_id: str  # "" for a submission whose batch id never reached the log (``intent``: find it)
    custom_id: str
    submitted_at: float | None = None  # wall clock (the record's ``at``): bounds how long it is waited for
    intent: str | None = None  # the submission's tag


SampleRef = tuple[str, int]  # (sample id as a string, epoch)


class ResumeTable:
    """Recorded requests by (model, sample, epoch, key), each queue in submission order."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, int, str], deque[RecordedRequest]] = {}

    @classmethod
    def from_records(cls, records: list[dict[str, Any]],
                     skip_samples: set[SampleRef] | frozenset[SampleRef] = frozenset()) -> ResumeTable:
        """From the log's ``batch`` records; requests of ``skip_samples`` (finished ones) are left out."""
        dead = {r.get("batch_id") for r in records if r.get("event") == "end" and r.get("state") in _DEAD_STATES}
        submits = [r for r in records if r.get("event") == "submit"]
        # The batch each submission made, once a submit line names it. A resumed run that found an intent's
        # batch writes that line for the requests it had attached then, maybe not all: the intent's other
        # requests are in the same batch, and a second kill must not send them again.
        batch_of = {str(r["intent"]): r.get("batch_id") for r in submits if r.get("intent") and r.get("batch_id")}
        named = {item.get("custom_id") for r in submits for item in r.get("requests") or [] if isinstance(item, dict)}
        table = cls()
        for record in records:
            event = record.get("event")
            batch_id = record.get("batch_id") if event == "submit" else batch_of.get(str(record.get("intent")), "")
            if event not in ("submit", "intent") or batch_id in dead:
                continue
            for item in record.get("requests") or []:
                try:
                    if event == "intent" and batch_id and item["custom_id"] in named:
                        continue  # its submit line has it already
                    ref = (str(item["sample_id"]), int(item["epoch"]))
                    at = record.get("at")
                    entry = RecordedRequest(str(batch_id or ""),
                                            str(item["custom_id"]), float(at) if isinstance(at, (int, float)) else None,
                                            str(record["intent"]) if record.get("intent") else None)
                    if event == "intent" and not entry.intent:
                        continue
                    key = (str(record.get("model")), *ref, str(item["key"]))
                except (KeyError, TypeError, ValueError):
                    continue  # a damaged record: that request is simply sent again
                if ref not in skip_samples:
                    table._entries.setdefault(key, deque()).append(entry)
        return table

    def take(self, model: str, sample: SampleRef, key: str) -> RecordedRequest | None:
        queue = self._entries.get((model, *sample, key))
        if not queue:
            return None
        entry = queue.popleft()
        if not queue:
            del self._entries[(model, *sample, key)]
        return entry

    def __len__(self) -> int:
        return sum(len(q) for q in self._entries.values())
