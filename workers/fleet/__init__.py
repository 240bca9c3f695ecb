"""The Redis fleet protocol: what orchestrators and workers agree on through Redis, both sides of it.

* ``names``: every wire name — queues, task names, Redis keys, channels (``_names``);
* the fleet secret and the MACs over what crosses the broker (``_auth``), and replay protection of
  signed task messages (``_replay``);
* stage outcomes on each dispatcher's reply channel (``_replies``), results Redis would not store kept
  and stored later (``_result_store``), and the fleet's events for orchestrators (``_events``);
* host liveness and capacity (``_heartbeat``) with the tools each host registered (``_tool_manifest``);
* sandbox placement: the reservation script (``_reserve``), slots reserved ahead (``_leases``) and the
  ``Placer`` over them, fair share between evals (``_placement``), the waiting placements an autoscaler
  reads (``_demand``).

The worker's side (``workers.app``, ``workers.tasks``, ``workers._loop``) and the orchestrator's
(``orchestrator.dispatch``) import these names from here, never the private modules.
"""

from . import _names as names
from ._auth import (
    DEST_HEADER,
    ISSUED_HEADER,
    MAC_HEADER,
    RESULT_MAC_FIELD,
    SECRET_ENV,
    SECRET_FILE_ENV,
    Keyring,
    MissingSecretError,
    cancel_mac,
    event_mac,
    load_keyring,
    message_mac,
    outcome_mac,
    result_mac,
    verify_cancel,
    verify_event,
    verify_message,
    verify_outcome,
    verify_result,
)
from ._demand import DEMAND_PRUNE_S, add_demand, keep_demand_owner, prune_demand, remove_demand
from ._events import FleetEvents
from ._heartbeat import Heartbeat, HostRecord, claim_identity
from ._patience import patiently
from ._placement import (
    FORK_SLOTS,
    FairShareError,
    NoCapacityError,
    NoLiveHostError,
    Placer,
    SandboxTooLargeError,
    SnapshotHostLostError,
    choose_hosts,
    keep_evals_alive,
    live_hosts,
    release_eval,
    release_slots,
    set_eval_counts,
    slot_weight,
    stop_waiting,
)
from ._replay import DEFAULT_REPLAY_WINDOW, EXPIRED, ReplayWindow, first_consumption, freshness_refusal, message_age
from ._replies import ReplySender, parse_items, read_stored
from ._result_store import UnstoredResults, is_out_of_memory
from ._tool_manifest import ToolManifest, read_tool_manifests

__all__ = [
    # wire names
    "names",
    # the fleet secret and MACs
    "DEST_HEADER",
    "ISSUED_HEADER",
    "MAC_HEADER",
    "RESULT_MAC_FIELD",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "Keyring",
    "MissingSecretError",
    "cancel_mac",
    "load_keyring",
    "message_mac",
    "outcome_mac",
    "event_mac",
    "result_mac",
    "verify_cancel",
    "verify_message",
    "verify_outcome",
    "verify_event",
    "verify_result",
    # replay protection
    "DEFAULT_REPLAY_WINDOW",
    "EXPIRED",
    "ReplayWindow",
    "first_consumption",
    "freshness_refusal",
    "message_age",
    # replies, unstored results, fleet events
    "FleetEvents",
    "ReplySender",
    "UnstoredResults",
    "is_out_of_memory",
    "parse_items",
    "patiently",
    "read_stored",
    # liveness and tools
    "Heartbeat",
    "HostRecord",
    "ToolManifest",
    "claim_identity",
    "read_tool_manifests",
    # placement
    "DEMAND_PRUNE_S",
    "FORK_SLOTS",
    "FairShareError",
    "NoCapacityError",
    "NoLiveHostError",
    "Placer",
    "SandboxTooLargeError",
    "SnapshotHostLostError",
    "add_demand",
    "choose_hosts",
    "keep_demand_owner",
    "keep_evals_alive",
    "live_hosts",
    "prune_demand",
    "release_eval",
    "release_slots",
    "remove_demand",
    "set_eval_counts",
    "slot_weight",
    "stop_waiting",
]
