"""The soak's batch-mode phase: an eval whose model requests go through a provider's batch API (the local
OpenAI-compatible stand-in, ``tests/support/openai_server.py``, playing the same chaos scripts), SIGKILLed
``batch_kills`` times at the worst moment — the provider has created a batch, the orchestrator has not
written its id — and resumed with ``eval-retry`` each time. Audited like the soak (transcripts against the
embedded reference, sandbox lines), and by what the provider saw: each request submitted exactly once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orchestrator.eval import read_eval_log
from tests.support.fleet import REPO_ROOT
from tests.support.openai_server import OpenAIServer, Reply, completion, tool_call

from . import _audit
from ._script import script
from .task import sample_ids

QUESTION = re.compile(r"chaos sample (\S+) seed (\d+)")


def play(body: dict[str, Any]) -> Reply:
    """The provider's side of a chaos sample: its script's next turn, read from the conversation so far."""
    messages = body["messages"]
    sample, seed = QUESTION.search(next(m["content"] for m in messages if m["role"] == "user")).groups()  # type: ignore[union-attr]
    turns = script(sample, int(seed))
    done = sum(1 for m in messages if m["role"] == "assistant")
    if done >= len(turns):
        return completion("done")
    return completion(tool_calls=[tool_call(c.function, dict(c.arguments), id=c.id) for c in turns[done]])


def request_identity(line: dict[str, Any]) -> tuple[str, int]:
    """(sample, turn) of one submitted batch line."""
    messages = line["body"]["messages"]
    sample = QUESTION.search(next(m["content"] for m in messages if m["role"] == "user")).group(1)  # type: ignore[union-attr]
    return sample, 1 + sum(1 for m in messages if m["role"] == "assistant")


@dataclass
class BatchResult:
    samples: int
    kills: int = 0
    requests: int = 0  # distinct (sample, turn) requests the provider saw
    submissions: int = 0  # request lines in every batch it was sent
    lost: int = 0
    duplicated: int = 0
    recovery: list[float] = field(default_factory=list)  # kill -> the resumed run found the batch
    eval_ids: set[str] = field(default_factory=set)

    @property
    def recovery_s(self) -> float:
        return statistics.median(self.recovery) if self.recovery else float("nan")


def batch_phase(soak: Any, reference: dict[str, Any]) -> BatchResult:
    o = soak.o
    result = BatchResult(o.batch_samples)
    log_dir = soak.work / "batch"
    options = soak.work / "batch.json"
    options.write_text(json.dumps({"size": o.batch_samples, "send_delay": 1, "tick": 0.2}))
    cmd = soak.eval_cmd(log_dir, "docker", distributed=True, samples=o.batch_samples, model="openai/chaos",
                        more=("--batch", str(options)))
    running: list[subprocess.Popen[bytes]] = []
    killed_at: list[float] = []

    def kill_before_answering(batch_id: str) -> None:
        if result.kills < o.batch_kills:
            result.kills += 1
            os.killpg(running[-1].pid, signal.SIGKILL)
            running[-1].wait(30)
            killed_at.append(time.monotonic())

    with OpenAIServer(responder=play) as server, open(soak.work / "batch.out", "ab") as out:
        server.on_batch_created = kill_before_answering
        env = soak.env(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test-key")
        try:
            running.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True))
            for _ in range(3 * (o.batch_kills + 1)):
                code = running[-1].wait(1800)
                [log] = log_dir.glob("*.jsonl")
                if code == 0:
                    break
                running.append(subprocess.Popen([*cmd[:3], "orchestrator.cli", "eval-retry", str(log), "--display",
                                                 "none"],
                                                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True))
                if killed_at:
                    result.recovery.append(_found_again(log, killed_at[-1]))
        finally:
            for proc in running:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        lines = [line for batch in server.batch_inputs.values() for line in batch]
    seen = Counter(request_identity(line) for line in lines)
    result.requests, result.submissions = len(seen), len(lines)
    result.duplicated = sum(n - 1 for n in seen.values())
    log_data = read_eval_log(log)
    result.eval_ids.add(log_data.eval.eval_id)
    audit = _audit.audit_samples(sample_ids(o.batch_samples), {str(s.id): s for s in log_data.samples}, reference)
    result.lost = len(audit.lost)
    result.duplicated += audit.duplicated
    return result


def _found_again(log: Any, since: float, bound: float = 300.0) -> float:
    """Seconds from the kill until the resumed run recorded the batch the killed one had sent."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        records = read_eval_log(log).batches
        intents = {r["intent"] for r in records if r["event"] == "intent"}
        found = {r.get("intent") for r in records if r["event"] == "submit"}
        if intents <= found:
            return round(time.monotonic() - since, 1)
        time.sleep(0.2)
    return float("nan")
