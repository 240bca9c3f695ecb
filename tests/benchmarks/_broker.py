"""The fleet a checkout benchmark measures: its own (``tests/support/fleet.py``: redis-server with a password
and worker processes, started and stopped by the workload), or a running one given with ``--broker``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tests.support.fleet import Fleet, running_fleet


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    # Explicit only (no $TOOLFLEET_BROKER): a figure should not depend on what the shell happens to export.
    parser.add_argument("--broker", default=None, metavar="URL",
                        help="measure the running fleet of this Redis instead of starting one (figures only its "
                             "own fleet can give, such as the workers' CPU and memory, are then null)")


@contextlib.asynccontextmanager
async def fleet_or_broker(broker: str | None, **fleet_options: Any) -> AsyncIterator[tuple[str, Fleet | None]]:
    """(broker URL, the fleet started here or None when ``broker`` is given)."""
    if broker:
        yield broker, None
        return
    async with running_fleet(**fleet_options) as fleet:
        yield fleet.url, fleet
