"""The worker's structlog lines obey ``toolfleet worker --loglevel`` (Celery's ``--loglevel``).

Unconfigured, structlog prints every line, debug included; a worker at WARNING then showed
``sandbox.opened`` and friends. Celery sets up stdlib logging from ``--loglevel`` and then sends
``after_setup_logger`` with that level: structlog is configured there to filter at the same level and
write to stderr (human lines on a TTY, JSON lines otherwise), like the orchestrator's CLI.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from celery.signals import after_setup_logger

__all__ = ["configure_structlog", "connect_log_level"]


def configure_structlog(level: int | str) -> None:
    numeric = level if isinstance(level, int) else logging.getLevelName(str(level).upper())
    if not isinstance(numeric, int):
        numeric = logging.WARNING
    renderer = (structlog.dev.ConsoleRenderer(colors=True) if sys.stderr.isatty()
                else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def _on_setup_logger(loglevel: Any = None, **_: Any) -> None:
    configure_structlog(loglevel if loglevel is not None else logging.WARNING)


def connect_log_level() -> None:
    """Follow the worker's log level (idempotent: one receiver whatever the number of apps)."""
    after_setup_logger.connect(_on_setup_logger, weak=False, dispatch_uid="toolfleet.worker.loglevel")
