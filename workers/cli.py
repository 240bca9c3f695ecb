"""``toolfleet worker``: a Celery worker with toolfleet's queues, pool and lifecycle.

    toolfleet worker --broker redis://redis:6379/0 --concurrency 64 --import mypkg.tools --hostname h1

Consumes the shared call queue and this host's own queue (sandbox affinity), imports user tool
modules so the registry holds them, reaps orphaned sandboxes and heartbeats capacity at start, and
drains on SIGTERM: the host is marked draining at once (no new placements), running calls finish,
then its sandboxes are closed and its heartbeat removed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import _names
from .app import BROKER_ENV, DEFAULT_BROKER
from ._loop import HOST_ENV, WorkerConfig, start_runtime, stop_runtime


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolfleet worker", description="Run a toolfleet worker (a Celery worker).")
    p.add_argument("--broker", default=os.environ.get(BROKER_ENV, DEFAULT_BROKER), help="Redis URL (broker and result store)")
    p.add_argument("--concurrency", "-c", type=int, default=64, help="calls executed at once (pool threads)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="tool module to import so its tools are registered (repeatable)")
    p.add_argument("--hostname", default=os.environ.get(HOST_ENV), help="this host's name in the fleet (default: the machine's)")
    p.add_argument("--slots", type=int, default=16, help="sandboxes this host accepts")
    p.add_argument("--heartbeat-interval", type=float, default=2.0)
    p.add_argument("--heartbeat-ttl", type=float, default=10.0, help="seconds without a heartbeat before the host is lost")
    p.add_argument("--orphan-grace", type=float, default=30.0,
                   help="seconds an orchestrator may be gone before the sandboxes it opened here are closed")
    p.add_argument("--pool", choices=["threads", "solo"], default="threads",
                   help="threads (default): concurrent calls share one asyncio loop; solo: one call at a time")
    p.add_argument("--task-events", "-E", action="store_true",
                   help="send Celery task events from the start (Flower switches them on itself with `enable_events`; "
                        "each call then costs ~3 more broker publishes, ~15%% of the worker's CPU per call)")
    p.add_argument("--loglevel", "-l", default="WARNING")
    return p


def worker_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    os.environ[BROKER_ENV] = args.broker  # so `workers.app` (celery -A workers.app ...) agrees
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--import tests.support.sample_tools` from the repo root
    for module in args.imports:
        importlib.import_module(module)
    config_kwargs = {"broker_url": args.broker, "slots": args.slots,
                     "heartbeat_interval": args.heartbeat_interval, "heartbeat_ttl": args.heartbeat_ttl,
                     "orphan_grace": args.orphan_grace}
    if args.hostname:
        config_kwargs["host"] = args.hostname
    config = WorkerConfig(**config_kwargs)
    os.environ[HOST_ENV] = config.host

    from . import app as app_module

    app = app_module.app  # the module's app (built now, from the broker just set): `celery -A workers.app` agrees
    _connect_lifecycle(app, config.host)
    rt = start_runtime(config)  # before consuming: the first task must find the loop and the host name
    try:
        app.worker_main([
            "worker",
            "--pool", args.pool,
            "--concurrency", str(1 if args.pool == "solo" else args.concurrency),
            "--queues", f"{_names.SHARED_QUEUE},{_names.host_queue(config.host)}",
            "--hostname", _names.worker_nodename(config.host),
            *(["--task-events"] if args.task_events else []),
            "--without-gossip",  # gossip/mingle add chatter and start-up delay; inspect/Flower do not need them
            "--without-mingle",
            "--loglevel", args.loglevel,
        ])
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        if rt is not None:
            stop_runtime()
    return 0


def _connect_lifecycle(app, host: str) -> None:  # type: ignore[no-untyped-def]
    from celery.signals import worker_ready, worker_shutting_down

    @worker_ready.connect(weak=False)
    def _ready(**_: object) -> None:
        # One line on stdout whatever the log level: supervisors and tests wait for it.
        print(f"toolfleet worker {host} ready (queues {_names.SHARED_QUEUE}, {_names.host_queue(host)})", flush=True)

    @worker_shutting_down.connect(weak=False)
    def _drain(**_: object) -> None:
        # Warm shutdown (SIGTERM): Celery stops consuming and waits for running calls; tell placement now.
        from ._loop import _runtime

        if _runtime is not None:
            _runtime.set_draining()


def main() -> None:
    raise SystemExit(worker_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
