"""What the soak checks after a run: every sample accounted for, no side effect twice, nothing left behind.

* **Samples** (``audit_samples``): each sample of the dataset has a record in the eval log; a completed one
  has exactly the tool messages the embedded reference run produced (call id, function, text, error, in
  declared order) and a sandbox log holding each expected line once (its score's metadata); an errored one
  carries its reason. ``lost``: a sample with no record, a transcript unlike the reference, an expected line
  missing, or a wrong fork; ``duplicated``: extra copies of a line, or lines no call of the sample writes.
* **Leaks** (``leaked_keys``): after the eval and a bounded grace, Redis holds only the long-lived keys of
  ``ALLOWED`` — each with the TTL it must carry, counters back at zero, queues and lease sets empty — and
  Docker no container labelled with the eval's id and no ``toolfleet/snapshot:*`` image of it (the soak
  lists those itself). ``kombu``'s ``unacked`` entries of a killed worker are not leaks: they are
  redelivered after the transport's visibility timeout (an hour) and are reported on their own.

Everything here but ``scan_redis`` is pure (table-tested in ``test_tables.py``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

# (pattern, what it is, whether it must expire by itself): the keys a fleet keeps between evals.
ALLOWED: tuple[tuple[str, str, bool], ...] = (
    ("toolfleet:hosts", "every host name that ever heartbeated (one per worker identity)", False),
    ("toolfleet:host:*:used", "a host's slot counter (must read 0 once its sandboxes are closed)", False),
    ("toolfleet:host:*:tools", "a live host's tool manifest", True),
    ("toolfleet:host:*:leased", "slots reserved ahead (the set expires with its last token)", True),
    ("toolfleet:host:*", "a live host's heartbeat", True),
    ("toolfleet:identity:*", "a live worker's claim on its name", True),
    ("toolfleet:call:*", "a call's claim: its replay memory", True),
    ("toolfleet:outcome:*", "a stage call's signed outcome", True),
    ("toolfleet:consumed:*", "a consumed open's id: its replay memory", True),
    ("toolfleet:claims-marker:*", "a worker's marker beside its claims", True),
    ("toolfleet:demand-owner:*", "an orchestrator whose placements waited: its demand tokens' owner", True),
    ("toolfleet:evals:slots", "fair share: slots per eval (this eval's entry must be gone or 0)", False),
    ("toolfleet:evals:alive", "fair share: evals with a live orchestrator (scored by expiry)", False),
    ("toolfleet:evals:waiting", "fair share: evals waiting for a slot (scored by expiry)", False),
    ("celery-task-meta-*", "an open/close result nobody read", True),
    ("_kombu.binding*", "kombu's queue bindings and their deadlines (one per queue)", False),
    ("unacked_mutex", "kombu's restore lock", True),
    ("*.reply.celery.pidbox", "a Celery control reply queue", True),
)
UNACKED = ("unacked", "unacked_index")  # kombu's delivered-not-acked messages (redelivered after its timeout)


def allowed(key: str) -> tuple[str, bool] | None:
    """The allow-list entry a key falls under (its pattern, whether it must expire); None: not allowed."""
    for pattern, _, expires in ALLOWED:
        if fnmatch.fnmatchcase(key, pattern):
            return pattern, expires
    return None


def leaked_keys(keys: dict[str, dict[str, Any]], eval_ids: set[str], now: float) -> list[str]:
    """Why each leaked key is one. ``keys``: name -> {"type", "ttl" (-1: none), "value"} as ``scan_redis``
    reads them (``value``: a string's value, a hash's or zset's mapping). Pure."""
    out: list[str] = []
    for key, info in sorted(keys.items()):
        if key in UNACKED:
            continue
        entry = allowed(key)
        if entry is None:
            out.append(f"{key}: not a long-lived key ({info.get('type')})")
            continue
        pattern, expires = entry
        if expires and info.get("ttl", -1) < 0:
            out.append(f"{key}: kept with no TTL")
        elif pattern == "toolfleet:host:*:used" and int(info.get("value") or 0) != 0:
            out.append(f"{key}: {info.get('value')} slots counted with no sandbox open")
        elif pattern == "toolfleet:evals:slots":
            out += [f"{key}: eval {e} still holds {n}" for e, n in (info.get("value") or {}).items()
                    if e in eval_ids and int(n) != 0]
        elif pattern in ("toolfleet:evals:alive", "toolfleet:evals:waiting"):
            out += [f"{key}: eval {e} still counted until {score:.0f}" for e, score in (info.get("value") or {}).items()
                    if e in eval_ids and score > now]
    return out


def scan_redis(client: Any) -> dict[str, dict[str, Any]]:
    """Every key, its type, TTL and (for the kinds ``leaked_keys`` reads) value."""
    out: dict[str, dict[str, Any]] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = client.type(key).decode()
        info: dict[str, Any] = {"type": kind, "ttl": client.ttl(key)}
        if kind == "string":
            info["value"] = (client.get(key) or b"").decode(errors="replace")
        elif kind == "hash" and key.startswith("toolfleet:evals"):
            info["value"] = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
        elif kind == "zset" and key.startswith("toolfleet:evals"):
            info["value"] = {m.decode(): s for m, s in client.zrange(key, 0, -1, withscores=True)}
        elif kind in ("list", "zset", "set", "hash"):
            sizes = {"list": client.llen, "zset": client.zcard, "set": client.scard, "hash": client.hlen}
            info["size"] = sizes[kind](key)
        out[key] = info
    return out


def tool_messages(sample: Any) -> list[tuple[str, str, str, str | None]]:
    """A sample's tool messages as (call id, function, text, error), in the order of its transcript."""
    return [(m.tool_call_id, m.function, m.text, f"{m.error.type}: {m.error.message}" if m.error else None)
            for m in sample.messages if m.role == "tool"]


@dataclass
class SampleAudit:
    completed: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # sample id -> its recorded reason
    lost: dict[str, str] = field(default_factory=dict)  # sample id -> what went wrong
    duplicated: int = 0  # extra or foreign lines, over every sample
    calls: int = 0  # tool messages of the completed samples
    snapshots: dict[str, int] = field(default_factory=dict)  # probe outcome -> samples


def audit_samples(expected_ids: list[str], samples: dict[str, Any], reference: dict[str, Any]) -> SampleAudit:
    """``samples``/``reference``: sample id -> the log's ``EvalSample`` of the run and of the embedded
    reference. Pure."""
    audit = SampleAudit()
    for sid in expected_ids:
        sample = samples.get(sid)
        if sample is None:
            audit.lost[sid] = "no record in the log"
            continue
        if sample.error is not None:
            audit.failed[sid] = sample.error.message.splitlines()[0][:200] if sample.error.message else "(no message)"
            continue
        audit.completed += 1
        mine = tool_messages(sample)
        audit.calls += len(mine)
        score = next(iter((sample.scores or {}).values()), None)
        meta = (score.metadata or {}) if score is not None else {}
        audit.duplicated += int(meta.get("duplicated", 0)) + int(meta.get("foreign", 0))
        probe = str(meta.get("snapshot", "")).split(":")[0]
        if probe:
            audit.snapshots[probe] = audit.snapshots.get(probe, 0) + 1
        ref = reference.get(sid)
        if ref is None or mine != tool_messages(ref):
            audit.lost[sid] = "tool messages differ from the embedded run" if ref is not None else "no reference"
        elif int(meta.get("missing", 1)):
            audit.lost[sid] = f"{meta.get('missing', '?')} expected line(s) missing in its sandbox"
        elif probe == "differs":
            audit.lost[sid] = "its fork did not see its sandbox's files"
    return audit
