"""Wire names shared by the orchestrator and the workers: queues, task names, Redis keys.

Everything both sides must agree on lives here, so a rename cannot leave one side behind.
"""

from __future__ import annotations

import re

PREFIX = "toolfleet"

# --- queues -------------------------------------------------------------------------------------
SHARED_QUEUE = f"{PREFIX}.calls"  # calls with no sandbox affinity: any worker may take them


def host_queue(host: str) -> str:
    """Each worker host consumes its own queue: a sample's calls go to the host holding its sandbox."""
    return f"{PREFIX}.host.{host}"


def host_of_queue(queue: str | None) -> str | None:
    """Inverse of ``host_queue`` (None for the shared queue or anything else)."""
    marker = f"{PREFIX}.host."
    if queue and queue.startswith(marker):
        return queue[len(marker):]
    return None


def worker_nodename(host: str) -> str:
    """The Celery node name of a host's worker (what ``celery inspect`` lists, and control commands target)."""
    return f"{PREFIX}@{host}"


# --- task names ---------------------------------------------------------------------------------
TASK_CALL = f"{PREFIX}.call"  # one call, its outcome in Celery's result store (plain Celery clients, `bench dispatch`)
# A stage's calls for one host queue in one message; outcomes come back on the sender's reply channel
# (what the Celery dispatcher sends: ``workers.fleet._replies``).
TASK_STAGE = f"{PREFIX}.stage"
MAX_STAGE_CALLS = 256  # calls one stage message may carry (a larger stage is split into several)
TASK_OPEN_SANDBOX = f"{PREFIX}.open_sandbox"
TASK_CLOSE_SANDBOX = f"{PREFIX}.close_sandbox"
# A live sandbox's network policy changes (a Harbor phase's network_mode): admitted and enforced by its host.
TASK_SANDBOX_NETWORK = f"{PREFIX}.sandbox_network"
CONTROL_CANCEL = "toolfleet_cancel"  # remote-control command: cancel a running call by id
# The only task names a worker accepts (Celery's built-ins such as ``celery.accumulate`` are refused).
TASK_NAMES = frozenset({TASK_CALL, TASK_STAGE, TASK_OPEN_SANDBOX, TASK_CLOSE_SANDBOX, TASK_SANDBOX_NETWORK})


def is_task_queue(queue: str | None) -> bool:
    """A queue carrying toolfleet task messages (the shared one or a host's), as opposed to Celery's
    own control (pidbox) and event queues."""
    return queue is not None and (queue == SHARED_QUEUE or queue.startswith(f"{PREFIX}.host."))

# --- Redis keys ---------------------------------------------------------------------------------
HOSTS_SET = f"{PREFIX}:hosts"  # every host that ever heartbeated (liveness is the heartbeat key)
# One entry per sandbox placement waiting for a free slot: the sample-load autoscaling signal
# (a list, so KEDA's Redis list scaler can read its length).
SANDBOX_DEMAND = f"{PREFIX}.sandbox.demand"


def demand_owner_key(client_id: str) -> str:
    """Kept fresh by an orchestrator while any of its placements waits: its demand tokens (``<client id>/…``)
    outlive it by this key's TTL at most (workers prune the rest, ``_demand``)."""
    return f"{PREFIX}:demand-owner:{client_id}"


def identity_key(host: str) -> str:
    """The claim on a worker identity: SET NX at start, refreshed by each heartbeat, deleted at stop."""
    return f"{PREFIX}:identity:{host}"


def heartbeat_key(host: str) -> str:
    """Hash with the host's capacity and state; expires when the host stops heartbeating."""
    return f"{PREFIX}:host:{host}"


def tools_key(host: str) -> str:
    """The tools the host registered at start (JSON, ``workers.fleet._tool_manifest``); expires with its heartbeat."""
    return f"{PREFIX}:host:{host}:tools"


def slots_used_key(host: str) -> str:
    """Counter of sandboxes placed on the host (placement INCRs, close DECRs; the host resets it at start)."""
    return f"{PREFIX}:host:{host}:used"


def leased_key(host: str) -> str:
    """Sorted set of the slots orchestrators reserved ahead on the host (lease token -> expiry): they
    count as used until handed out (then the counter counts them) or given back, or by themselves
    until they expire (an orchestrator that died holding them)."""
    return f"{PREFIX}:host:{host}:leased"


def lease_key(client_id: str) -> str:
    """An orchestrator's (dispatcher's) lease, refreshed while it runs: sandboxes it opened live only
    as long as it does (a worker closes those whose owner's lease has been gone for a while)."""
    return f"{PREFIX}:lease:{client_id}"


def call_key(call_id: str) -> str:
    """Marker of a call being executed (``running:<host>``), so a redelivery is not run twice."""
    return f"{PREFIX}:call:{call_id}"


def claims_marker_key(owner: str) -> str:
    """Set by a worker process (``<host>/<boot>``) alongside its claims: gone means Redis lost them."""
    return f"{PREFIX}:claims-marker:{owner}"


def consumed_key(task_id: str) -> str:
    """A consumed sandbox-open message's id, kept for the replay window (``_replay``): a copy opens nothing."""
    return f"{PREFIX}:consumed:{task_id}"


# Workers PUBLISH what an orchestrator must learn at once here (``workers.fleet._events``): a task
# message rejected (wrong secret, clock skew), a result Redis would not store (out of memory).
# PUBLISH is allowed even when Redis is at maxmemory.
FLEET_EVENTS_CHANNEL = f"{PREFIX}:fleet-events"


def result_key(task_id: str) -> str:
    """Celery's Redis result backend key for a task; it also PUBLISHes the result on this channel."""
    return f"celery-task-meta-{task_id}"


RESULT_PREFIX = "celery-task-meta-"

# Stage outcomes (``workers.fleet._replies``): each dispatcher SUBSCRIBEs one reply channel of its own; a
# worker PUBLISHes every signed outcome there as soon as the call completes and keeps a copy under
# the call's outcome key (TTL) for a re-check after a reconnect and for redelivered copies.
REPLY_PREFIX = f"{PREFIX}:reply:"
_REPLY_ID = re.compile(r"[0-9a-f]{32}")


def reply_channel(client_id: str) -> str:
    return f"{REPLY_PREFIX}{client_id}"


def is_reply_channel(channel: object) -> bool:
    """A message names its reply channel; only this fixed prefix + 32 hex digits is accepted (a message
    never picks an arbitrary Redis channel)."""
    return (isinstance(channel, str) and channel.startswith(REPLY_PREFIX)
            and _REPLY_ID.fullmatch(channel[len(REPLY_PREFIX):]) is not None)


def outcome_key(call_id: str) -> str:
    """A stage call's signed outcome, kept ``OUTCOME_TTL`` seconds."""
    return f"{PREFIX}:outcome:{call_id}"

# Fair sharing of one fleet between evals (workers/fleet/_placement.py): slots each eval holds (a hash),
# evals whose orchestrator is alive (a sorted set scored by expiry) and evals with a sample waiting
# for a slot (same).
EVAL_SLOTS = f"{PREFIX}:evals:slots"
EVALS_ALIVE = f"{PREFIX}:evals:alive"
EVALS_WAITING = f"{PREFIX}:evals:waiting"
