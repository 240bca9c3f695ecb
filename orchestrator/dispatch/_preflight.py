"""What a dispatcher checks before an eval's first sample: can the sandboxes it needs open where it runs them.

``InProcessDispatcher.preflight``: every docker image is on this machine's Docker, or pullable (from any
registry), and every network mode a sandbox asks for is enforced here (``check_local_networks``); tools
run in this process, so there is nothing to check about them. ``CeleryDispatcher.preflight``:
the broker has live workers; every tool the samples run on workers is registered on every live worker
that takes calls (see ``check_worker_tools``); if sandboxes are needed, one of them accepts them, runs
their type, allows and has (or pulls) each image, offers each network mode (``--allow-network``, and a
host that enforces it), and has slots for the largest multi-service sandbox.
Each problem is one ``PreflightError`` sentence (a ``SetupError``: the CLI prints it as one line, exit 1).
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Collection, Sequence
from typing import Any

import structlog

from orchestrator._errors import SetupError
from orchestrator.util._image_names import image_registry, pulls_from

log = structlog.get_logger("toolfleet.dispatch")

__all__ = ["PROBE_TIMEOUT_S", "PreflightError", "SandboxNeeds", "check_fleet", "check_local_images",
           "check_local_networks", "check_worker_tools", "network_refusal"]

PROBE_TIMEOUT_S = 5.0
FRESH_IMAGE_WAIT_S = 12.0  # > the workers' image-listing period (5 s) plus a heartbeat interval


class PreflightError(SetupError):
    """A problem found before the eval started, no sample run yet: here, the sandboxes (or worker tools) an
    eval needs cannot open where its dispatcher runs them; in ``orchestrator.eval``, a sandbox spec or the
    model endpoint. One sentence."""


def redact(url: str | None) -> str | None:
    """Hide a password in a URL before it is shown."""
    if not url or "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


class SandboxNeeds:
    """What an eval's sandboxes need, from one parse of each distinct spec: what ``Dispatcher.preflight`` checks."""

    def __init__(self) -> None:
        self.images: dict[str, list[str]] = {}  # docker image (services' too) -> the samples that need it
        self.kinds: set[str] = set()  # sandbox types used
        self.pullable: set[str] = set()  # images some sandbox may pull (pull_policy not never, a registry host)
        self.pods: dict[int, list[str]] = {}  # containers of a multi-service sandbox -> its samples
        # Tools the samples run on workers (registry name) -> what `toolfleet worker --import` takes to
        # register it: its module, or the task file defining it ('' if unknown).
        self.tools: dict[str, str] = {}
        # Samples whose task runs commands as root in their sandboxes (a worker must allow it: --allow-root-user).
        self.root: list[str] = []
        # Network modes a host must enforce for them (``DockerSandboxConfig.enforced_modes``) -> their samples.
        self.networks: dict[str, list[str]] = {}


def _who(samples: list[str]) -> str:
    shown = ", ".join(samples[:3]) + (f" and {len(samples) - 3} more" if len(samples) > 3 else "")
    return f"sample{'s' if len(samples) > 1 else ''} {shown}"


async def check_local_images(images: dict[str, list[str]], pullable: Collection[str] = ()) -> None:
    """Embedded mode: every image is on this machine's Docker, or ``pullable`` (from any registry)."""
    if not images:
        return

    def missing() -> list[str]:
        import docker
        from docker.errors import ImageNotFound

        client = docker.from_env(timeout=int(PROBE_TIMEOUT_S))
        try:
            gone = []
            for image in images:
                try:
                    client.api.inspect_image(image)
                except ImageNotFound:
                    gone.append(image)
            return gone
        finally:
            client.close()

    try:
        gone = await asyncio.wait_for(asyncio.to_thread(missing), PROBE_TIMEOUT_S * (len(images) + 1))
        gone = [image for image in gone if image not in pullable]  # pulled by its driver when needed
    except Exception as exc:  # docker raises many kinds; all mean "not reachable"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PreflightError(f"Cannot reach the Docker daemon (needed for docker sandboxes): {reason}") from exc
    if gone:
        image = gone[0]
        more = f" (and {len(gone) - 1} more image(s))" if len(gone) > 1 else ""
        raise PreflightError(f"Docker image '{image}' ({_who(images[image])}) is not on this machine{more}: "
                             f"build it or `docker pull {image}`.")


ENFORCING_HINT = "nftables and CAP_NET_ADMIN in the host's network namespace: docs/egress.md"


async def check_local_networks(egress: Any, networks: dict[str, list[str]]) -> None:
    """Embedded mode: this machine's egress enforcer (``workers.egress.EgressEnforcer``, started now)
    enforces every mode the samples ask for."""
    if not networks:
        return
    modes = await egress.ready()
    for mode, who in sorted(networks.items()):
        if not egress.enforcing or mode not in modes:
            raise PreflightError(f"Network mode '{mode}' ({_who(who)}) cannot be enforced on this machine "
                                 f"({egress.unavailable}); it needs {ENFORCING_HINT}.")


def network_refusal(mode: str, who: list[str], hosts: Sequence[Any]) -> str | None:
    """Why no live worker in ``hosts`` takes a sandbox asking for network ``mode`` (None: one does).
    A worker lists the modes it gives sandboxes networks of their own for, [] where its host enforces
    none. Pure; table-tested."""
    if any(mode in h.network_modes for h in hosts):
        return None
    if any(h.network_modes for h in hosts):
        return (f"Network mode '{mode}' ({_who(who)}) is allowed by none of the {len(hosts)} live worker(s): "
                f"start workers with --allow-network {mode}.")
    return (f"Network mode '{mode}' ({_who(who)}) is enforced by none of the {len(hosts)} live worker(s): "
            f"their hosts cannot enforce network policies ({ENFORCING_HINT}).")


def accepting_hosts(hosts: Sequence[Any], signing_id: str | None) -> list[Any]:
    """The hosts that accept this orchestrator's key (all when it is unknown, or a host does not say):
    none is one line naming the secret; some is a warning, and placement passes the others by."""
    foreign = [h for h in hosts if signing_id is not None and h.keys and signing_id not in h.keys]
    if not foreign:
        return list(hosts)
    ids = ", ".join(sorted({k for h in foreign for k in h.keys}))
    names = _listed(sorted(f"worker host '{h.host}'" for h in foreign), 3)
    if len(foreign) == len(hosts):
        verb = "holds" if len(foreign) == 1 else "hold"
        raise PreflightError(f"No live worker accepts this orchestrator's messages: {names} {verb} another fleet "
                             f"secret (key id {ids}; this orchestrator signs with {signing_id}): set the same "
                             "TOOLFLEET_SECRET (or TOOLFLEET_SECRET_FILE) on both.")
    log.warning("preflight.hosts_with_another_secret", hosts=names, their_keys=ids, ours=signing_id)
    return [h for h in hosts if h not in foreign]


def _listed(items: list[str], limit: int = 5) -> str:
    """``a``, ``a and b``, ``a, b and c``; beyond ``limit``: ``a, b, ... and N more``."""
    shown = items[:limit] + ([f"{len(items) - limit} more"] if len(items) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _tool_names(names: list[str], tools: dict[str, str]) -> str:
    def one(name: str) -> str:
        where = tools.get(name) or ""
        kind = "task file" if where.endswith(".py") else "module"
        return f"'{name}' ({kind} {where})" if where else f"'{name}'"

    return _listed([one(n) for n in names])


def _imports(names: list[str], tools: dict[str, str], who: str) -> str:
    wanted = list(dict.fromkeys(tools[n] for n in names if tools.get(n)))
    if not wanted:
        return f"start {who} with --import naming the module that defines {'them' if len(names) > 1 else 'it'}"
    return f"start {who} with " + " ".join(f"--import {w}" for w in wanted)


async def check_worker_tools(client: Any, hosts: Sequence[Any], tools: dict[str, str]) -> None:
    """Every tool ``tools`` names is registered on every live worker that takes calls (one sentence if not).

    Workers publish the tools they registered at start (``workers.fleet.ToolManifest``). A tool on no worker
    would fail every sample at its first call. A tool on only some workers is refused too: a sample's
    calls go to whichever worker holds its sandbox (or any worker, without one), and placement does not
    look at tools, so such an eval would fail some samples and not others. A worker that publishes no
    list (an older version) or a cut one is not held against a tool it may have.
    """
    from workers.fleet import read_tool_manifests

    serving = [h for h in hosts if not h.draining]
    if not tools or not serving:
        return
    manifests = await asyncio.wait_for(read_tool_manifests(client, [h.host for h in serving]), PROBE_TIMEOUT_S * 2)
    known = {host: m for host, m in manifests.items() if m is not None}
    if not known:
        return
    lacking = {name: sorted(h for h, m in known.items() if m.has(name) is False) for name in sorted(tools)}
    nowhere = [n for n, without in lacking.items() if len(without) == len(serving)]  # every worker said so
    if nowhere:
        several = len(nowhere) > 1
        raise PreflightError(f"Tool{'s' if several else ''} {_tool_names(nowhere, tools)} "
                             f"{'are' if several else 'is'} registered on no live worker: "
                             f"{_imports(nowhere, tools, 'workers')}.")
    partial = [n for n, without in lacking.items() if without]
    if partial:
        hosts_without = sorted({h for n in partial for h in lacking[n]})
        several = len(partial) > 1
        raise PreflightError(
            f"Tool{'s' if several else ''} {_tool_names(partial, tools)} {'are' if several else 'is'} not registered "
            f"on {len(hosts_without)} of the {len(serving)} live worker(s) ({_listed(hosts_without, 3)}), and a "
            f"sample's calls may go to any of them: {_imports(partial, tools, 'every worker')}.")


async def check_fleet(broker_url: str, images: dict[str, list[str]], kinds: set[str],
                      pullable: Collection[str] = (), pods: dict[int, list[str]] | None = None,
                      tools: dict[str, str] | None = None, networks: dict[str, list[str]] | None = None,
                      root: list[str] | None = None, signing_id: str | None = None) -> None:
    """Distributed mode: live workers exist, accept messages signed with ``signing_id`` (this
    orchestrator's key), have every tool the samples run on them, accept sandboxes if needed (and run
    commands as root for the ``root`` samples), and have (or can pull) every image."""
    from redis.asyncio import Redis

    from workers.fleet import live_hosts

    client = Redis.from_url(broker_url, socket_connect_timeout=PROBE_TIMEOUT_S, socket_timeout=PROBE_TIMEOUT_S)
    try:
        hosts = await asyncio.wait_for(live_hosts(client), PROBE_TIMEOUT_S * 2)
        if not hosts:
            raise PreflightError(f"No live worker on the broker {redact(broker_url)}: start one with "
                                 f"`toolfleet worker --broker {redact(broker_url)}`.")
        hosts = accepting_hosts(hosts, signing_id)
        await check_worker_tools(client, hosts, tools or {})
    finally:
        await client.aclose()
    if not kinds:
        return
    takers = [h for h in hosts if not h.draining and h.slots > 0]
    if not takers:
        raise PreflightError(f"None of the {len(hosts)} live worker(s) accepts sandboxes (all draining or --slots 0).")
    for kind in sorted(kinds):
        if all(h.sandbox_types and kind not in h.sandbox_types for h in takers):
            hint = " (start a worker with --allow-local)" if kind == "local" else ""
            raise PreflightError(f"None of the {len(takers)} live worker(s) runs {kind!r} sandboxes{hint}.")
    if root:
        # A sample may be placed on any of them (placement does not look at this): every one must allow it.
        refusing = sorted(h.host for h in takers if not h.allow_root)
        if len(refusing) == len(takers):
            raise PreflightError(f"The task runs commands as root in its sandboxes ({_who(root)}), which no live "
                                 "worker allows: start the workers with --allow-root-user.")
        if refusing:
            raise PreflightError(f"The task runs commands as root in its sandboxes ({_who(root)}), which "
                                 f"{len(refusing)} of the {len(takers)} live workers ({_listed(refusing, 3)}) do not "
                                 "allow, and a sample may be placed on any: start every worker with --allow-root-user.")
    for mode, who in sorted((networks or {}).items()):
        why = network_refusal(mode, who, takers)
        if why is not None:
            raise PreflightError(why)
    largest = max(h.slots for h in takers)
    for containers, who in sorted((pods or {}).items(), reverse=True)[:1]:
        if containers > largest:
            raise PreflightError(f"The sandbox of {_who(who)} has {containers} containers and takes {containers} slots "
                                 f"on one worker, but no live worker has that many (largest --slots: {largest}).")
    for image, who in images.items():
        if all(h.image_patterns and not any(fnmatch.fnmatchcase(image, p) for p in h.image_patterns) for h in takers):
            patterns = ", ".join(sorted({p for h in takers for p in h.image_patterns}))
            raise PreflightError(f"Docker image '{image}' ({_who(who)}) is allowed by none of the {len(takers)} live "
                                 f"worker(s) (their --image patterns: {patterns}): start workers with "
                                 f"--image '{image}' or a pattern matching it.")

    def missing(hosts: Sequence[Any]) -> list[str]:
        return [image for image in images
                if not any(image in h.images or (image in pullable and pulls_from(h.registries, image)) for h in hosts)]

    # Workers list their images every few seconds: one built just now (a Harbor task's, at load) may not
    # be listed yet. Wait (bounded) for the next listings before calling it missing.
    deadline = asyncio.get_running_loop().time() + FRESH_IMAGE_WAIT_S
    while missing(takers) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(1.0)
        client = Redis.from_url(broker_url, socket_connect_timeout=PROBE_TIMEOUT_S, socket_timeout=PROBE_TIMEOUT_S)
        try:
            names = {h.host for h in takers}
            takers = [h for h in await asyncio.wait_for(live_hosts(client), PROBE_TIMEOUT_S * 2) if h.host in names]
        finally:
            await client.aclose()
    for image, who in images.items():
        if image in missing(takers):
            registry = image_registry(image)
            hint = (f", and none pulls from its registry '{registry}' (start one with --registry {registry})"
                    if registry and image in pullable else "")
            raise PreflightError(f"Docker image '{image}' ({_who(who)}) is on none of the {len(takers)} live "
                                 f"worker(s){hint}: build or pull it where the workers run.")
