"""``GenerateConfig.batch`` (True, a size, or a ``BatchConfig``) resolved against defaults (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from .._generate_config import BatchConfig

DEFAULT_SIZE = 100
DEFAULT_SEND_DELAY_S = 15.0
DEFAULT_TICK_S = 15.0
DEFAULT_MAX_BATCHES = 100
DEFAULT_MAX_CHECK_FAILURES = 1000


@dataclass(frozen=True)
class BatchSettings:
    size: int  # send once this many requests wait
    max_size: int  # never more than this many in one batch
    send_delay: float  # ...or once the oldest waiting request is this old
    tick: float  # seconds between looks at the queue and at each batch's status
    max_batches: int  # batches in flight at once
    max_check_failures: int  # consecutive failed status checks before the batch's requests fail


def batch_settings(value: bool | int | BatchConfig | None, provider_max: int) -> BatchSettings | None:
    """None when batching is off (None, False); else every option with its default filled in."""
    if value is None or value is False:
        return None
    if value is True:
        config = BatchConfig()
    elif isinstance(value, int):
        config = BatchConfig(size=value)
    else:
        config = value
    max_size = min(config.max_size or provider_max, provider_max)
    return BatchSettings(
        size=min(config.size or DEFAULT_SIZE, max_size),
        max_size=max_size,
        send_delay=DEFAULT_SEND_DELAY_S if config.send_delay is None else config.send_delay,
        tick=config.tick or DEFAULT_TICK_S,
        max_batches=config.max_batches or DEFAULT_MAX_BATCHES,
        max_check_failures=config.max_consecutive_check_failures or DEFAULT_MAX_CHECK_FAILURES,
    )
