"""Eval setup at the boundary: pick the dispatcher, check the broker / Docker daemon answer, resolve policies.

Failures here are user mistakes (``SetupError`` subclasses) with one clear sentence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orchestrator.dispatch import Dispatcher, InProcessDispatcher
from orchestrator.dispatch._preflight import redact as redact  # re-exported (the CLI and the log use it)

from ._errors import BrokerUnreachableError, DockerUnreachableError, EvalSetupError, PolicyFileError

PREFLIGHT_TIMEOUT_S = 5.0


async def make_dispatcher(broker: str | None, egress_allow: Sequence[str] | None = None) -> Dispatcher:
    """Embedded (in-process) without a broker; the Celery dispatcher with one (checked reachable first).
    ``egress_allow`` (``--egress-allow``): embedded mode's own sandbox host, whose egress enforcer lets
    sandboxes reach those networks too; with a broker the workers' flags decide, so it is refused."""
    if broker is None:
        if egress_allow:
            try:
                return InProcessDispatcher.with_egress_allowances(egress_allow)
            except ValueError as exc:
                raise EvalSetupError(str(exc)) from None
        return InProcessDispatcher()
    if egress_allow:
        raise EvalSetupError("--egress-allow is for embedded mode: with --broker each worker's own --egress-allow "
                             "decides what its sandboxes reach (docs/egress.md).")
    await _check_broker(broker)
    try:
        from orchestrator.dispatch.celery import CeleryDispatcher
    except ImportError as exc:
        raise BrokerUnreachableError(f"Distributed mode is not available in this install: {exc}") from exc
    return CeleryDispatcher(broker)


async def _check_broker(url: str) -> None:
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    try:
        client = aioredis.from_url(url, socket_connect_timeout=PREFLIGHT_TIMEOUT_S, socket_timeout=PREFLIGHT_TIMEOUT_S)
    except ValueError as exc:
        raise BrokerUnreachableError(f"Invalid broker URL '{redact(url)}': {exc}") from exc
    try:
        await asyncio.wait_for(client.ping(), PREFLIGHT_TIMEOUT_S)
    except (RedisError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise BrokerUnreachableError(f"Cannot reach the broker at {redact(url)}: {reason}") from exc
    finally:
        await client.aclose()


async def check_docker() -> None:
    def ping() -> None:
        import docker

        client = docker.from_env(timeout=int(PREFLIGHT_TIMEOUT_S))
        try:
            client.ping()
        finally:
            client.close()

    try:
        await asyncio.wait_for(asyncio.to_thread(ping), PREFLIGHT_TIMEOUT_S + 1)
    except Exception as exc:  # docker raises many kinds; all mean "not reachable"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DockerUnreachableError(f"Cannot reach the Docker daemon (needed for --sandbox docker): {reason}") from exc


def resolve_policies(approval: Any, review: Any) -> tuple[list[Any] | None, list[Any] | None]:
    from orchestrator.approval import resolve_approval
    from orchestrator.review import ReviewPolicy, review_policy_from_file
    from orchestrator.review._review import reviewer_factory

    try:
        approval_policy = resolve_approval(approval)
        if review is None or isinstance(review, list):
            review_policy = review
        elif str(review) in ("human", "auto"):
            review_policy = [ReviewPolicy(reviewer=reviewer_factory(str(review))(), tools="*")]
        else:
            review_policy = review_policy_from_file(review)
    except (ValueError, TypeError) as exc:
        raise PolicyFileError(str(exc).splitlines()[0]) from exc
    return approval_policy, review_policy
