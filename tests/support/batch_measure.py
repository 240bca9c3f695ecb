"""Measure ``toolfleet eval --batch`` per provider: requests per batch, batches, wall time.

``python -m tests.support.batch_measure [--samples 50] [--size 50] [--max-samples 32]``: the batch-react
eval (two turns per sample: two parallel ``bash`` calls, then submit) through the real CLI against the
test batch servers (OpenAI Batch, Anthropic Message Batches), which end a batch the first time it is
polled. Options: ``size`` as given, ``send_delay`` 2 s, ``tick`` 0.5 s. Prints, per provider, the
batches and how many requests (each from a different sample) each held, the direct requests (0), the
process's wall time and the eval's own time (from the log).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.eval import read_eval_log
from tests.eval.task_files import BATCH_REACT
from tests.eval.test_batch_eval import PROVIDERS, _env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--max-samples", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options = Path(tmp) / "batch.json"
        options.write_text(json.dumps({"size": args.size, "send_delay": 2, "tick": 0.5}))
        for provider, (make, model, _) in PROVIDERS.items():
            logs = Path(tmp) / provider
            with make() as server:
                cmd = [sys.executable, "-m", "orchestrator.cli", "eval", f"{BATCH_REACT}@batch_react", "--model", model,
                       "-T", f"n={args.samples}", "--batch", str(options), "--max-samples", str(args.max_samples),
                       "--log-dir", str(logs), "--display", "none"]
                start = time.monotonic()
                done = subprocess.run(cmd, env=_env(server, provider), capture_output=True, text=True)
                wall = time.monotonic() - start
            [path] = logs.glob("*.jsonl")
            log = read_eval_log(path)
            submitted = [r for r in log.batches if r["event"] == "submit"]
            per_batch = [len({q["sample_id"] for q in r["requests"]}) for r in submitted]
            summary = done.stdout.splitlines()[1] if done.returncode == 0 else done.stderr.strip()[-300:]
            print(f"{provider}: {summary}; batches={len(submitted)}, samples per batch={per_batch}, "
                  f"direct requests={server.direct_completions}, wall {wall:.1f} s "
                  f"(eval {log.stats.completed_at - log.stats.started_at:.1f} s)")  # type: ignore[operator]


if __name__ == "__main__":
    main()
