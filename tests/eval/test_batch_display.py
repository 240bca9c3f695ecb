"""Batch mode on the displays: batches pending and done, counted per eval from the pool's reports."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from orchestrator.eval._display import RichDisplay
from orchestrator.eval._progress import EvalProgress
from orchestrator.model._batch import BatchScope


def test_scope_counts_each_batch_once_and_journals_it() -> None:
    progress = EvalProgress(task="t", model="openai/m", total=4)
    records: list[dict[str, Any]] = []
    seen: list[tuple[int, int]] = []

    async def journal(record: dict[str, Any]) -> None:
        records.append(record)

    def changed(pending: int, done: int) -> None:
        progress.batches_pending, progress.batches_done = pending, done
        seen.append((pending, done))

    scope = BatchScope(journal=journal, on_change=changed)

    async def run() -> None:
        await scope.submitted("openai/m", "b1", [{"custom_id": "c1", "sample_id": "s1", "epoch": 1, "turn": 1,
                                                  "key": "k"}])
        scope.waiting_on("b1")  # a resumed request attaching to the same batch: not a second one
        scope.waiting_on("b0")  # a batch an earlier run submitted
        await scope.ended("openai/m", "b1", "completed", None)
        await scope.ended("openai/m", "b1", "completed", None)  # reported twice: counted once
        await scope.ended("openai/m", "b0", "expired", "window passed")

    asyncio.run(run())
    assert seen == [(1, 0), (2, 0), (1, 1), (0, 2)]
    assert [(r["event"], r["batch_id"]) for r in records] == [("submit", "b1"), ("end", "b1"), ("end", "b0")]
    assert records[2]["state"] == "expired" and records[2]["error"] == "window passed"
    snap = progress.snapshot()
    assert (snap["batches_pending"], snap["batches_done"]) == (0, 2)


def test_a_journal_that_cannot_write_costs_nothing_else() -> None:
    async def broken(record: dict[str, Any]) -> None:
        raise OSError("disk full")

    scope = BatchScope(journal=broken)
    asyncio.run(scope.submitted("openai/m", "b1", []))
    assert scope.pending == 1


def test_rich_display_shows_batches_only_in_batch_mode() -> None:
    progress = EvalProgress(task="t", model="openai/m", total=4)
    out = io.StringIO()
    display = RichDisplay(progress, file=out)

    def text() -> str:
        display.console.print(display.render())
        value = out.getvalue()
        out.seek(0)
        out.truncate()
        return value

    assert "batches" not in text()
    progress.batches_pending, progress.batches_done = 2, 3
    assert "2 pending, 3 done" in text()
