"""``toolfleet worker``: a Celery worker with toolfleet's queues, pool and lifecycle.

    toolfleet worker --broker redis://redis:6379/0 --concurrency 64 --import mypkg.tools --hostname h1

Every worker process has its own identity in the fleet (``--hostname``; default
``<machine>-<pid>-<random>``, so several workers on one machine just work). A worker refuses to start
under an identity another live worker is heartbeating with.

Consumes the shared call queue and this host's own queue (sandbox affinity), loads user tool code
(``--import``, ``--path``, ``--install``, ``$TOOLFLEET_IMPORT``: ``_tool_modules``) so the registry holds
it, publishes what it registered (``fleet._tool_manifest``, read by the eval's preflight), reaps orphaned sandboxes and
heartbeats capacity at start, and drains on SIGTERM: the host is marked draining at once (no new placements), running
calls finish, then its sandboxes are closed and its heartbeat removed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import secrets
import socket
import sys
import uuid
from typing import Any

from ._admission import AdmissionRules, broker_is_loopback
from ._loop import HOST_ENV, Runtimes, WorkerConfig
from ._tool_modules import IMPORT_ENV, ToolModuleError, ToolModules, imports_from_env
from .app import BROKER_ENV, DEFAULT_BROKER, AppConfig, create_worker_app
from .egress import EgressEnforcer, EgressError
from .fleet import (
    DEFAULT_REPLAY_WINDOW,
    SECRET_ENV,
    SECRET_FILE_ENV,
    Keyring,
    MissingSecretError,
    ReplayWindow,
    claim_identity,
    load_keyring,
    names,
)
from .sandbox._registry import SandboxRegistry
from .sandbox.docker import HostSandboxes
from .sandbox_host import SandboxHost

# Tool modules every worker registers at start-up (the built-in tools); --import adds the user's.
BUILTIN_TOOL_MODULES = ("orchestrator.tool._tools", "orchestrator.tool._tools._sandbox_access", "workers.snapshots")
# Celery remote-control commands a worker keeps: read-only inspection, events for Flower, and our
# signed cancel. Control messages carry no fleet MAC, so the ones that change a worker (shutdown,
# pool_restart, revoke, add_consumer, rate_limit, ...) are removed unless --unsafe-remote-control.
SAFE_CONTROL = frozenset({"active", "active_queues", "clock", "conf", "hello", "ping", "query_task", "registered",
                          "report", "reserved", "revoked", "scheduled", "stats", "heartbeat",
                          "enable_events", "disable_events", names.CONTROL_CANCEL})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolfleet worker", description="Run a toolfleet worker (a Celery worker).")
    p.add_argument("--broker", default=os.environ.get(BROKER_ENV, DEFAULT_BROKER),
                   help="Redis URL (broker and result store)")
    p.add_argument("--concurrency", "-c", type=int, default=64, help="calls executed at once (pool threads)")
    tools = p.add_argument_group("tool code (loaded at start only: a message never imports anything)")
    tools.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="tool module to import so its tools are registered, or a task file (path/to/task.py) "
                            f"(repeatable; ${IMPORT_ENV}, comma-separated, adds more)")
    tools.add_argument("--path", dest="paths", action="append", default=[], metavar="DIR",
                       help="directory put on the import path before importing (repeatable)")
    tools.add_argument("--install", dest="installs", action="append", default=[], metavar="WHEEL",
                       help="wheel (or directory of wheels) installed offline (pip --no-deps --no-index) into "
                            "a directory of this worker's own before importing (repeatable)")
    p.add_argument("--hostname", default=os.environ.get(HOST_ENV),
                   help="this worker's identity in the fleet, unique per worker process "
                        "(default: <machine>-<pid>-<random>; a name a live worker already uses is refused)")
    p.add_argument("--slots", type=int, default=16,
                   help="containers this worker holds at most: running samples' sandboxes and warm spares together")
    p.add_argument("--warm-pool", type=int, default=2, metavar="N",
                   help="warm spare containers kept at most, over all images (least recently used image first "
                        "to go; 0: no spares)")
    p.add_argument("--pool-idle-ttl", type=float, default=300.0, metavar="SECONDS",
                   help="a spare idle this long is removed (and not replaced until its image is used again)")
    p.add_argument("--pool-image", dest="pool_images", action="append", metavar="PATTERN",
                   help="images pre-started when a sandbox does not set pool_size (repeatable; default: "
                        "the default sandbox image only; a sample's own image is not pooled unless asked)")
    p.add_argument("--snapshot-disk", type=_size, default=None, metavar="SIZE",
                   help="disk budget of the sandbox snapshots kept on this host, e.g. 20g (default: "
                   "TOOLFLEET_SNAPSHOT_DISK, else 10g); a snapshot that does not fit is refused")
    p.add_argument("--heartbeat-interval", type=float, default=2.0)
    p.add_argument("--heartbeat-ttl", type=float, default=10.0,
                   help="seconds without a heartbeat before the host is lost")
    p.add_argument("--orphan-grace", type=float, default=30.0,
                   help="seconds an orchestrator may be gone before the sandboxes it opened here are closed")
    p.add_argument("--pool", choices=["threads", "solo"], default="threads",
                   help="threads (default): concurrent calls share one asyncio loop; solo: one call at a time")
    p.add_argument("--task-events", "-E", action="store_true",
                   help="send Celery task events from the start (Flower switches them on itself with `enable_events`; "
                        "each call then costs ~3 more broker publishes, ~15%% of the worker's CPU per call)")
    p.add_argument("--loglevel", "-l", default="WARNING")
    trust = p.add_argument_group("trust (what this worker agrees to run; a message can only ask)")
    trust.add_argument("--secret-file", default=os.environ.get(SECRET_FILE_ENV),
                       help=f"file holding the fleet secret (one a line, newest first); default ${SECRET_ENV}")
    trust.add_argument("--allow-local", action="store_true",
                       help="also run `local` sandboxes (subprocesses on this host as this user: NO isolation; "
                            "for development and tests only)")
    trust.add_argument("--allow-local-remote", action="store_true",
                       help="accept --allow-local although the broker is not on loopback (anyone who can sign a "
                            "message can then run commands on this host)")
    trust.add_argument("--allow-root-user", action="store_true",
                       help="let a message run sandbox commands as uid or gid 0 (refused by default, however written)")
    trust.add_argument("--local-root", metavar="DIR",
                       help="parent directory of local sandboxes (default: the system temp dir)")
    trust.add_argument("--image", dest="images", action="append", metavar="PATTERN",
                       help="allowed sandbox image pattern (repeatable; default toolfleet/*)")
    trust.add_argument("--registry", dest="registries", action="append", type=_registry_host, metavar="HOST[:PORT]",
                       help="registry this worker pulls sandbox images from when a sample's image names it and is "
                            "missing here (repeatable; default: none: the worker never pulls)")
    trust.add_argument("--allow-network", dest="networks", action="append", choices=["public", "allowlist"],
                       help="sandbox network mode a sandbox may ask for besides none (repeatable): allowlist (only "
                            "its allowed_hosts) or public (the internet; allowlist too). Either way never this "
                            "host, the broker, other sandboxes, metadata or private ranges (docs/egress.md); "
                            "enforced with nftables, which needs CAP_NET_ADMIN in the host's network namespace")
    trust.add_argument("--egress-allow", dest="egress_allow", action="append", default=[], metavar="CIDR|HOST",
                       help="a private network or host sandboxes with a network may reach besides the internet "
                            "(repeatable), e.g. a package mirror on 10.0.0.0/8; never link-local, metadata, this "
                            "host or the broker")
    trust.add_argument("--egress-dns", dest="egress_dns", action="append", default=[], metavar="ADDR[:PORT]",
                       help="resolver the sandboxes' DNS filter asks (repeatable; default: this host's "
                            "/etc/resolv.conf)")
    trust.add_argument("--egress-pool", dest="egress_pool", default="10.213.0.0/16", metavar="CIDR",
                       help="IPv4 network the sandboxes' own networks are carved from (a /27 each); it must "
                            "overlap none of this host's, the cluster's or the test internet's networks")
    trust.add_argument("--max-memory", default="4g", help="cap on a sandbox's memory limit")
    trust.add_argument("--max-cpus", type=float, default=float(os.cpu_count() or 1),
                       help="cap on a sandbox's CPU limit (default: this host's CPUs)")
    trust.add_argument("--max-pids", type=int, default=4096, help="cap on a sandbox's pids limit")
    trust.add_argument("--max-outcome-bytes", type=int, default=512 * 1024,
                       help="a call's result is cut to this many bytes at the worker (the model sees 16 KiB by "
                            "default)")
    trust.add_argument("--message-max-age", dest="replay", type=_replay_window,
                       default=DEFAULT_REPLAY_WINDOW,
                       metavar="SECONDS",
                       help="a signed task message older than this is refused as a possible replay (default "
                            f"{DEFAULT_REPLAY_WINDOW.max_age:g}); a call that waited this long in the queue is sent "
                            "again by its orchestrator, so raising it only trades memory for fewer re-sends")
    trust.add_argument("--unsafe-remote-control", action="store_true",
                       help="keep all of Celery's remote-control commands (shutdown, revoke, pool_restart, ...), "
                            "which anyone who can write to the broker can send")
    return p


def network_modes(asked: list[str] | None) -> list[str]:
    """``--allow-network`` values as the modes admitted: none always; public brings allowlist (narrower)."""
    modes = {"none", *(asked or [])}
    if "public" in modes:
        modes.add("allowlist")
    return [m for m in ("none", "public", "allowlist") if m in modes]


def build_admission(args: argparse.Namespace) -> AdmissionRules:
    return AdmissionRules(
        sandbox_types=["docker", "local"] if args.allow_local else ["docker"],
        images=args.images or ["toolfleet/*"],
        network_modes=network_modes(args.networks),
        max_memory=args.max_memory, max_cpus=args.max_cpus, max_pids=args.max_pids,
        max_outcome_bytes=args.max_outcome_bytes, local_root=args.local_root, registries=args.registries or [],
        allow_root=args.allow_root_user,
    )


def _size(value: str) -> int:
    """``--snapshot-disk``: a size in Docker's notation (``20g``, ``512m``, bytes)."""
    from ._admission import AdmissionRefused, parse_bytes

    try:
        return parse_bytes(value)
    except AdmissionRefused:
        raise argparse.ArgumentTypeError(f"not a size: {value!r} (e.g. 20g, 512m)") from None


def _replay_window(value: str) -> ReplayWindow:
    """``--message-max-age SECONDS`` as the window it sets (the bounds are ReplayWindow's own)."""
    try:
        return ReplayWindow(max_age=float(value))
    except ValueError:  # not a number, or out of (0, 7 days] (pydantic's ValidationError is a ValueError)
        raise argparse.ArgumentTypeError(f"expected seconds, more than 0 and at most 604800; got {value!r}") from None


def _registry_host(value: str) -> str:
    """``--registry``: a registry host as an image names it (``HOST[:PORT]``: no scheme, no path)."""
    if not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(:\d{1,5})?", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST[:PORT] (no scheme, no path), e.g. 127.0.0.1:5000")
    return value


def build_egress(args: argparse.Namespace, owner: str) -> EgressEnforcer:
    """The worker's one egress enforcer: the operator's allowances, and its broker's host protected
    (never reachable from a sandbox, whatever the operator allows)."""
    from pydantic import ValidationError

    from .egress import EgressConfig, EgressEnforcer
    from .sandbox.docker import DockerAPI

    try:
        pool = getattr(args, "egress_pool", None)
        config = EgressConfig(allow=tuple(args.egress_allow), protect=broker_hosts(args.broker),
                              upstreams=tuple(getattr(args, "egress_dns", ())),
                              **({"subnet_pool": pool} if pool else {}))
    except ValidationError as exc:  # one line naming the flag
        error = exc.errors()[0]
        flag = _EGRESS_FLAGS.get(str(error["loc"][0]) if error["loc"] else "", "--egress-*")
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(message if message.startswith("--") else f"{flag}: {message}") from None
    return EgressEnforcer(config, DockerAPI(None, 4), owner=owner)


_EGRESS_FLAGS = {"allow": "--egress-allow", "upstreams": "--egress-dns", "subnet_pool": "--egress-pool",
                 "protect": "--broker"}


def broker_hosts(url: str) -> tuple[str, ...]:
    """The broker's host as a URL names it (an address or a name, resolved when the enforcer starts);
    none for a unix socket or loopback (sandboxes never reach the host's own addresses anyway)."""
    from urllib.parse import urlsplit

    if broker_is_loopback(url):
        return ()
    host = (urlsplit(url).hostname or "").strip("[]")
    return (host,) if host else ()


def default_identity() -> str:
    """``<machine>-<pid>-<4 hex>``: unique per worker process, readable in ``docker ps`` and logs."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def _restrict_remote_control() -> None:
    from celery.worker.control import Panel

    for name in [n for n in Panel.data if n not in SAFE_CONTROL]:
        Panel.data.pop(name, None)


def worker_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        keyring = load_keyring(secret_file=args.secret_file)
    except MissingSecretError as exc:
        print(f"toolfleet worker: {exc}", file=sys.stderr)
        return 2
    if args.allow_local and not args.allow_local_remote and not broker_is_loopback(args.broker):
        print("toolfleet worker: --allow-local runs message-chosen commands on this host without isolation, and "
              "this broker is not on loopback: use docker sandboxes, or add --allow-local-remote if you mean it",
              file=sys.stderr, flush=True)
        return 2
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--import tests.support.sample_tools` from the repo root
    for module in BUILTIN_TOOL_MODULES:
        importlib.import_module(module)
    tool_code = ToolModules([*args.imports, *imports_from_env()], args.paths, args.installs)
    try:
        tool_code.load()  # the registry is complete now: a message never imports anything
    except ToolModuleError as exc:
        tool_code.close()
        print(f"toolfleet worker: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        return _run(args, keyring)
    finally:
        tool_code.close()


def _run(args: argparse.Namespace, keyring: Keyring) -> int:
    if not args.unsafe_remote_control:
        _restrict_remote_control()
    config = WorkerConfig(broker_url=args.broker, slots=args.slots, host=args.hostname or default_identity(),
                          heartbeat_interval=args.heartbeat_interval, heartbeat_ttl=args.heartbeat_ttl,
                          orphan_grace=args.orphan_grace, admission=build_admission(args), replay=args.replay)
    duplicate = claim_identity(args.broker, config.host, token=uuid.uuid4().hex)
    if duplicate:
        print(f"toolfleet worker: {duplicate}", file=sys.stderr, flush=True)
        return 2
    os.environ[HOST_ENV] = config.host  # what a `local` sandbox's commands see as $TOOLFLEET_HOST
    # This worker's sandboxes: its slots and spares; containers labelled with its identity; pulls from its
    # registries only (none by default). Built here and handed to the runtime its tasks run on.
    try:
        egress = build_egress(args, config.host)
    except ValueError as exc:  # an --egress-allow that is neither a network nor a host, or never reachable
        print(f"toolfleet worker: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        return 2
    sandboxes = SandboxHost(HostSandboxes(limit=args.slots, max_spares=args.warm_pool, idle_ttl=args.pool_idle_ttl,
                                          pooled_images=args.pool_images or (), owner=config.host,
                                          registries=config.admission.registries, egress=egress), SandboxRegistry())
    if args.snapshot_disk:
        sandboxes.docker.snapshots.budget = args.snapshot_disk  # bytes (--snapshot-disk, parsed)
    runtimes = Runtimes(args.broker)
    app = create_worker_app(AppConfig(broker_url=args.broker, replay=args.replay), keyring=keyring, runtimes=runtimes)
    _connect_lifecycle(app, config.host, runtimes)
    if args.allow_local:
        print("toolfleet worker: --allow-local: `local` sandboxes run as this user on this host, with NO isolation",
              file=sys.stderr, flush=True)
    try:
        # before consuming: the first task must find the loop and the host name
        rt = runtimes.start(config, keyring, sandboxes)
    except EgressError as exc:  # e.g. an --egress-allow name that does not resolve
        runtimes.stop()
        print(f"toolfleet worker: {exc}", file=sys.stderr, flush=True)
        return 2
    if rt is not None and rt.heartbeat is not None:  # what this worker runs, for the orchestrator's preflight
        rt.heartbeat.record.image_patterns = list(config.admission.images)
        rt.heartbeat.record.sandbox_types = list(config.admission.sandbox_types)
        rt.submit(rt.heartbeat.beat(), timeout=30.0)  # published before this worker says it is ready
    try:
        app.worker_main([
            "worker",
            "--pool", args.pool,
            "--concurrency", str(1 if args.pool == "solo" else args.concurrency),
            "--queues", f"{names.SHARED_QUEUE},{names.host_queue(config.host)}",
            "--hostname", names.worker_nodename(config.host),
            *(["--task-events"] if args.task_events else []),
            "--without-gossip",  # gossip/mingle add chatter and start-up delay; inspect/Flower do not need them
            "--without-mingle",
            "--loglevel", args.loglevel,
        ])
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        runtimes.stop()
    return 0


def _connect_lifecycle(app: Any, host: str, runtimes: Runtimes) -> None:  # app: a Celery app (untyped)
    from celery.signals import worker_ready, worker_shutting_down

    @worker_ready.connect(weak=False)
    def _ready(**_: object) -> None:
        # One line on stdout whatever the log level: supervisors and tests wait for it.
        print(f"toolfleet worker {host} ready (queues {names.SHARED_QUEUE}, {names.host_queue(host)})", flush=True)

    @worker_shutting_down.connect(weak=False)
    def _drain(**_: object) -> None:
        # Warm shutdown (SIGTERM): Celery stops consuming and waits for running calls; tell placement now.
        if runtimes.current is not None:
            runtimes.current.set_draining()


def main() -> None:
    raise SystemExit(worker_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
