"""The loop-stall diagnostic (orchestrator/util/_loop_watchdog.py): it names the code that blocked the
event loop, times garbage-collector pauses, and is off unless TOOLFLEET_LOOP_WATCHDOG asks for it."""

from __future__ import annotations

import asyncio
import gc
import io
import time

import pytest

from orchestrator.util._loop_watchdog import ENV_VAR, LoopWatchdog, watchdog_from_env


def _blocks_the_loop() -> None:
    time.sleep(0.4)  # a synchronous call inside async code: what the watchdog is for


async def test_a_stall_is_reported_with_the_stack_that_caused_it() -> None:
    watchdog = LoopWatchdog(threshold=0.05)
    watchdog.start()
    try:
        await asyncio.sleep(0.05)
        _blocks_the_loop()
        await asyncio.sleep(0.05)
        gc.collect(0)
    finally:
        watchdog.stop()
    assert len(watchdog.stalls) >= 1
    assert any("_blocks_the_loop" in frame for stack in watchdog.stacks for frame in stack[:2])
    assert watchdog.gc_pauses[0]  # the collection on the loop thread was timed
    out = io.StringIO()
    watchdog.report(out)
    assert "_blocks_the_loop" in out.getvalue() and "gc gen0" in out.getvalue()
    assert watchdog._on_gc not in gc.callbacks  # stopped: nothing left behind


async def test_off_unless_asked_and_a_bad_value_says_so(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert watchdog_from_env() is None
    monkeypatch.setenv(ENV_VAR, "fast")
    assert watchdog_from_env() is None
    assert capsys.readouterr().err.count("\n") == 1  # one clear line
    monkeypatch.setenv(ENV_VAR, "30")
    watchdog = watchdog_from_env()
    assert watchdog is not None and watchdog.threshold == pytest.approx(0.03)
    watchdog.stop()
