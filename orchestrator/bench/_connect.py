"""The fleet a measurement runs on: a Celery dispatcher over a running fleet's broker, and its sandboxes."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

from orchestrator._wire import CallRequest, SandboxSpec

if TYPE_CHECKING:
    from orchestrator.dispatch import Dispatcher, SampleRoute

BROKER_ENV = "TOOLFLEET_BROKER"


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    # $TOOLFLEET_BROKER as `toolfleet eval` and the worker read it: a URL with the password stays out of argv.
    parser.add_argument("--broker", default=os.environ.get(BROKER_ENV) or None, metavar="URL",
                        help=f"the running fleet's Redis (default ${BROKER_ENV}); messages are signed with "
                             "TOOLFLEET_SECRET (or TOOLFLEET_SECRET_FILE), as the workers expect")


async def fleet_dispatcher(broker: str | None) -> Any:
    """A ``CeleryDispatcher`` on ``broker``, checked reachable first; a user's mistake is one clear line."""
    from orchestrator._errors import SetupError
    from orchestrator.eval._setup import make_dispatcher

    if not broker:
        raise SetupError(f"this measures a running fleet: give --broker URL (or set {BROKER_ENV}).")
    try:
        return await make_dispatcher(broker)
    except RuntimeError as exc:  # no fleet secret: nothing could run on the workers
        raise SetupError(str(exc)) from exc


async def open_sandboxes(dispatcher: Dispatcher, n: int, config: dict[str, Any], eval_id: str,
                         prefix: str) -> tuple[list[SampleRoute], float]:
    """``n`` sandboxes opened at once, and the seconds that took."""
    start = time.perf_counter()
    routes = await asyncio.gather(*(dispatcher.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id=f"{prefix}-{i}",
                                                                         config=config)) for i in range(n)))
    return list(routes), time.perf_counter() - start


def bash_request(route: SampleRoute, cmd: str = "true") -> CallRequest:
    """One ``bash`` tool call into ``route``'s sandbox, as ``execute_tools`` would send it."""
    from orchestrator.tool._registry import tool_ref
    from orchestrator.tool._tools import bash

    ref = tool_ref(bash())
    return CallRequest(call_id=uuid.uuid4().hex, function="bash", tool=ref, arguments={"cmd": cmd},
                       sandbox=route.sandbox, sample_id=route.sample_id)
