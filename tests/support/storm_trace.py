"""Print the adaptive-concurrency trace of an eval under an injected 429 storm.

``python -m tests.support.storm_trace [--samples 60] [--storm 1.0:3.0]``: a local Messages-API server
answers every request with a 429 (``retry-after: 0.2``) inside the storm window (seconds after the first
request) and a plain answer after 50 ms otherwise; an embedded eval of ``--samples`` one-turn samples runs
against it with ``--max-connections 16``. Prints the footer's ``stats.connections`` trace and the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import threading
import time
from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.scorer import includes
from orchestrator.solver import generate

from .anthropic_server import AnthropicServer, Reply, message, rate_limited


def storm_responder(start: float, end: float) -> Any:
    first: list[float] = []
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Reply:
        with lock:
            now = time.monotonic()
            first[:] = first or [now]
            t = now - first[0]
        if start <= t < end:
            return rate_limited("0.2")
        time.sleep(0.05)
        i = re.search(r"What is (\d+)\?", json.dumps(body["messages"][0]))
        return message(f"answer-{i.group(1) if i else '?'}")

    return respond


async def main(samples: int, start: float, end: float, max_connections: int) -> None:
    with AnthropicServer(responder=storm_responder(start, end)) as server, tempfile.TemporaryDirectory() as logs:
        os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"] = server.base_url, "k"
        task = Task(dataset=[Sample(input=f"What is {i}?", target=f"answer-{i}", id=i) for i in range(samples)],
                    solver=generate(), scorer=includes())
        began = time.monotonic()
        [log] = await eval_async(task, "anthropic/claude-test", log_dir=logs, max_connections=max_connections,
                                 max_samples=samples, config={"max_retries": 50})
        wall = time.monotonic() - began
        report = log.stats.connections["anthropic/claude-test"]
        refused = sum(1 for s in log.samples for e in s.events if getattr(e, "source", None) == "model_retry")
        print(f"status {log.status}; {samples} samples in {wall:.1f}s; {len(server.requests)} requests, "
              f"{refused} refused with 429 and retried")
        print(f"ceiling {report.ceiling}, lowest {report.lowest}, final {report.final}, "
              f"overloads counted {report.overloads}")
        print("   t(s)  limit  reason")
        for change in report.trace:
            print(f"{change.at:7.2f}  {change.limit:5d}  {change.reason}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--storm", default="1.0:3.0", help="START:END seconds after the first request")
    parser.add_argument("--max-connections", type=int, default=16)
    a = parser.parse_args()
    s, _, e = a.storm.partition(":")
    asyncio.run(main(a.samples, float(s), float(e), a.max_connections))
