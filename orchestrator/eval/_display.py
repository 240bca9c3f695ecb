"""Progress displays: a live ``rich`` panel on a TTY, structured log lines (structlog, JSON) otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

from ._progress import EvalProgress

LOG_INTERVAL_S = 10.0  # how often the log display emits a progress line between sample lines


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class RichDisplay:
    def __init__(self, progress: EvalProgress, file: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.progress = progress
        self.console = Console(file=file or sys.stderr)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False, get_renderable=self.render)

    def render(self) -> Any:
        from rich.markup import escape
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        from orchestrator.util._terminal import terminal_safe as safe

        p = self.progress
        grid = Table.grid(padding=(0, 2))
        grid.add_column(justify="right", style="bold")
        grid.add_column()
        # Names and notices may come from a third party's task file: no markup, no control sequences.
        grid.add_row("task", f"{escape(safe(p.task))}  [dim]{escape(safe(p.model))}[/dim]")
        if p.notice:
            grid.add_row("note", f"[yellow]{escape(safe(p.notice))}[/yellow]")
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=max(p.total, 1), completed=p.done, width=40), f"{p.done}/{p.total} samples")
        grid.add_row("progress", bar)
        grid.add_row("running", str(p.running))
        if p.waiting:
            grid.add_row("waiting", f"[yellow]{p.waiting} sample(s) waiting for a sandbox slot (fleet busy)[/yellow]")
        errors = f"[red]{p.errors}[/red]" if p.errors else "0"
        grid.add_row("errors", f"{errors}  (sample retries {p.retries}, model API retries {p.model_retries}, "
                               f"rate limited {p.rate_limits})")
        grid.add_row("tool calls", f"{p.tool_calls}  ({p.tool_calls_per_s:.1f}/s)")
        grid.add_row("tokens", f"{p.tokens:,}   cost {escape(p.cost_text)}")
        if p.connections is not None:
            grid.add_row("connections", f"{p.connections}  ({p.limiter.in_flight} in flight, adaptive)")
        if p.batches_pending or p.batches_done:
            grid.add_row("batches", f"{p.batches_pending} pending, {p.batches_done} done")
        grid.add_row("elapsed", f"{_fmt_eta(p.elapsed)}   ETA {_fmt_eta(p.eta_s)}")
        grid.add_row("log", f"[dim]{escape(safe(p.log))}[/dim]")
        return grid

    def __enter__(self) -> RichDisplay:
        from orchestrator.approval._console import add_prompt_guard

        self.live.start()
        add_prompt_guard(self.paused)  # a human approver/reviewer prompt pauses the live panel
        return self

    def __exit__(self, *exc: object) -> None:
        from orchestrator.approval._console import remove_prompt_guard

        remove_prompt_guard(self.paused)
        self.live.refresh()
        self.live.stop()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop redrawing (and give stdout back) while an operator answers a console prompt."""
        self.live.stop()
        try:
            yield
        finally:
            self.live.start()


class LogDisplay:
    """One JSON line per finished sample (after it is on disk) and a heartbeat line every few seconds."""

    def __init__(self, progress: EvalProgress, file: TextIO | None = None) -> None:
        import structlog

        self.progress = progress
        self.log = structlog.wrap_logger(
            structlog.PrintLogger(file=file or sys.stderr),
            processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                        structlog.processors.JSONRenderer()],
            # Progress lines are the display itself: never filtered by the process's log level.
            wrapper_class=structlog.make_filtering_bound_logger(0),
        )
        self._ticker: asyncio.Task[None] | None = None

    def on_change(self, what: str, progress: EvalProgress) -> None:
        if what == "sample":
            self.log.info("sample_done", **progress.snapshot())
        elif what == "retry":
            self.log.warning("sample_retry", **progress.snapshot())
        elif what == "batch":
            self.log.info("batches", **progress.snapshot())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(LOG_INTERVAL_S)
            self.log.info("progress", **self.progress.snapshot())

    def __enter__(self) -> LogDisplay:
        self.progress.listeners.append(self.on_change)
        self.log.info("eval_start", log=self.progress.log, **self.progress.snapshot())
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.progress.listeners.remove(self.on_change)
        self.log.info("eval_end", **self.progress.snapshot())


@contextlib.asynccontextmanager
async def open_display(display: Any, progress: EvalProgress) -> AsyncIterator[None]:
    # Inspect's display names: "plain" is line output, "full"/"conversation" the live view.
    kind = ({"plain": "log", "full": "rich", "conversation": "rich"}.get(display, display) if isinstance(display, str)
            else display)
    if kind == "auto":
        kind = "rich" if sys.stderr.isatty() else "log"
    if kind in (None, "none"):
        # No display, but resuming (or not) is never silent.
        if progress.notice:
            from orchestrator.util._terminal import terminal_safe

            print(f"toolfleet: {terminal_safe(progress.notice)}", file=sys.stderr, flush=True)
        yield
        return
    if kind == "rich":
        shown: Any = RichDisplay(progress)
    elif kind == "log":
        shown = LogDisplay(progress)
    else:
        shown = kind(progress) if callable(kind) else kind  # a custom display object / factory
    with shown:
        yield
