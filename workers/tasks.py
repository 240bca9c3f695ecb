"""Celery task bodies: a thin transport around ``workers.executor`` and ``workers.sandbox_host``.

* ``toolfleet.stage(reply, payloads)``: what the Celery dispatcher sends — a stage's calls for this
  host in one message; they run concurrently on the worker's loop and each outcome is PUBLISHed on
  the sender's ``reply`` channel (and kept under its outcome key) as soon as it completes
  (``workers.fleet._replies``); Celery stores no result. Each call is claimed and remembered exactly as
  below (the claims of one stage in one round trip).
* ``toolfleet.call(payload)``: one call, for plain Celery clients:
``execute_request(CallRequest.model_validate(payload))`` → the
  ``CallOutcome`` as JSON. Only registered tools run (the executor rebuilds them from the registry by
  ``ToolRef``); the call id is the task id, and ``_call_memory`` answers a redelivered copy with the
  stored outcome instead of running the call again.
* ``toolfleet.open_sandbox(spec)`` / ``toolfleet.close_sandbox(handle)``: sandbox lifecycle on this host.
* ``toolfleet.sandbox_network(handle, policy)``: a live sandbox's new network policy (a Harbor phase's),
  admitted as ``network_mode`` is at open (``--allow-network``) and enforced by this host; a replayed
  copy changes nothing (remembered as an open is).
* remote-control ``toolfleet_cancel(call_ids)``: cancel running calls (the sandbox kills the process
  group). Celery's own ``revoke(terminate=True)`` cannot stop a call in the threads pool.

Every wait is bounded; every failure comes back as data (an outcome, or ``{"error": ...}``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import structlog
from celery import Celery
from celery.exceptions import Ignore
from celery.worker.control import control_command
from celery.worker.request import Request
from pydantic import ValidationError
from redis.exceptions import RedisError

from orchestrator._wire import CallOutcome, CallRequest, FatalError, SandboxSpec
from orchestrator.tool._registry import is_registered, not_registered_message
from orchestrator.tool._tool_call import ToolCallError

from ._admission import AdmissionRefused, admit_network, admit_sandbox
from ._bounds import call_timeout, result_bytes
from ._call_memory import CallRunningElsewhere
from ._loop import Runtimes, WorkerRuntime
from ._outcome_cap import cap_outcome
from ._rejects import rejects
from .fleet import first_consumption, names, slot_weight, verify_cancel

log = structlog.get_logger("toolfleet.worker")


def _payload_cap(app: Celery) -> int:
    return int(getattr(app.conf, "toolfleet_max_payload_bytes", 8 * 1024 * 1024))


def _payload_too_large(app: Celery, payload: Any) -> int | None:
    cap = _payload_cap(app)
    size = len(json.dumps(payload, separators=(",", ":")))
    return cap if size > cap else None


def _error_outcome(call_id: str, host: str, type_: str, message: str) -> dict[str, Any]:
    outcome: dict[str, Any] = json.loads(_error_json(call_id, host, type_, message))
    return outcome


def _error_json(call_id: str, host: str, type_: str, message: str) -> str:
    now = time.time()
    error = ToolCallError(type=type_, message=message)
    return CallOutcome(call_id=call_id, error=error, started=now, completed=now, host=host).model_dump_json()


async def run_call(rt: WorkerRuntime, payload: dict[str, Any], task_id: str) -> dict[str, Any]:
    """One call's outcome as JSON data (the ``toolfleet.call`` task's result)."""
    outcome: dict[str, Any] = json.loads((await answer_call(rt, payload, task_id))[1])
    return outcome


async def answer_call(rt: WorkerRuntime, payload: Any, task_id: str) -> tuple[str, str]:
    """``(call_id, outcome JSON text)``; raises ``CallRunningElsewhere`` when another live process
    holds the call (its execution answers)."""
    host = rt.config.host
    call_id = str(payload.get("call_id") or task_id) if isinstance(payload, dict) else task_id
    try:
        request = CallRequest.model_validate(payload)
    except ValidationError as exc:
        now = time.time()
        fatal = FatalError(type="InvalidCallRequest", message=f"The worker refused a malformed call request: {exc}")
        outcome = CallOutcome(call_id=call_id, fatal=fatal, started=now, completed=now, host=host)
        return call_id, outcome.model_dump_json()
    assert rt.memory is not None
    # A message's own numbers, bounded (workers._bounds): a call never outlives the worker's deadline.
    request = request.model_copy(update={"timeout": call_timeout(request.timeout, rt.config.max_call_seconds),
                                         "max_result_bytes": result_bytes(request.max_result_bytes)})
    if request.tool is not None and not is_registered(request.tool.name):
        # Only the registry built at start-up (built-ins + --import): a message never causes an import.
        now = time.time()
        fatal = FatalError(type="ToolNotRegisteredError",
                           message=not_registered_message(request.tool.name, request.tool.module))
        outcome = CallOutcome(call_id=call_id, fatal=fatal, started=now, completed=now, host=host)
        return call_id, outcome.model_dump_json()
    if rt.memory.was_cancelled(call_id):
        return call_id, _error_json(call_id, host, "cancelled", "The call was cancelled before it started.")
    deadline = (request.timeout or rt.config.max_call_seconds) + rt.config.call_grace
    try:
        # The claim is also the call's replay memory: kept at least as long as a copy could be accepted.
        outcome = await rt.memory.run_once(call_id,
                                           lambda: _capped(rt.sandboxes.execute(request),
                                                           rt.admission.max_outcome_bytes),
                                           claim_ttl=max(deadline, rt.config.replay.ttl))
    except asyncio.CancelledError:
        return call_id, _error_json(call_id, host, "cancelled", "The call was cancelled.")
    except (RedisError, OSError) as exc:  # Redis stayed down past the claim's patience
        return call_id, _error_json(call_id, host, "sandbox_unavailable",
                                    f"The worker could not claim the call in Redis ({exc}); it was not run.")
    outcome.host = host
    text = outcome.model_dump_json()
    if len(text) > request.max_result_bytes:
        cap = request.max_result_bytes
        limit = f"{cap // (1024 * 1024)} MiB" if cap >= 1 << 20 else f"{cap} bytes"
        text = outcome.model_copy(update={"result": None, "error": ToolCallError(type="limit",
                                  message=f"The tool exceeded its output limit of {limit}.")}).model_dump_json()
    return call_id, text


async def run_stage(rt: WorkerRuntime, reply: str, payloads: list[Any], task_id: str, cap: int) -> None:
    """A stage's calls, concurrently on this loop; each answered on ``reply`` as soon as it completes
    (``workers.fleet._replies``). The declared-order splice is the orchestrator's: order does not matter here."""
    replies = rt.replies
    assert replies is not None

    async def one(payload: Any) -> None:
        if not isinstance(payload, dict) or not isinstance(payload.get("call_id"), str):
            rejects.reject("malformed stage call", None, f"stage {task_id[:64]}")
            return  # no call id to answer under
        call_id = payload["call_id"]
        try:
            if len(json.dumps(payload, separators=(",", ":"))) > cap:
                text = _error_json(call_id, rt.config.host, "limit",
                                   f"The tool call's arguments exceeded the payload limit of {cap} bytes.")
            else:
                _, text = await answer_call(rt, payload, call_id)
        except CallRunningElsewhere:
            return  # the process running it answers on the same reply channel
        except Exception as exc:  # never leave the orchestrator waiting for its deadline
            log.exception("worker.stage_call_failed", call_id=call_id[:64])
            text = _error_json(call_id, rt.config.host, "sandbox_unavailable",
                               f"The worker failed to run the call: {exc}")
        replies.send(reply, call_id, text)

    await asyncio.gather(*(one(p) for p in payloads))


async def _capped(run: Any, cap: int) -> CallOutcome:
    """The outcome cut to the worker's cap before anything keeps it (call memory, the result store)."""
    return cap_outcome(await run, cap)


async def run_open(rt: WorkerRuntime, payload: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    host = rt.config.host
    if rt.draining:
        return {"error": {"type": "draining",
                          "message": f"Worker host '{host}' is draining and takes no new sandboxes."}}
    try:
        spec = SandboxSpec.model_validate(payload)
        spec = spec.model_copy(update={"config": admit_sandbox(rt.admission, spec.config)})  # the worker decides
        from ._exec_user import gate_installer

        handle, execs = await rt.sandboxes.open(spec, gate_installer(rt.admission.allow_root, spec.config))
    except AdmissionRefused as exc:
        log.warning("worker.sandbox_refused", host=host, reason=str(exc))
        return {"error": {"type": "PolicyRefused", "message": str(exc)}, "host": host}  # the wire's name, kept
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as data
        log.warning("worker.open_sandbox_failed", host=host, error=str(exc))
        return {"error": {"type": type(exc).__name__, "message": str(exc)}, "host": host,
                **_execs_json(getattr(exc, "sandbox_execs", None))}
    if rt.heartbeat is not None:
        rt.heartbeat.record.sandboxes += slot_weight(spec.config)
    if owner:
        rt.owners[handle] = owner
    return {"handle": handle, "host": host, **_execs_json(execs)}


def _execs_json(execs: Any) -> dict[str, Any]:
    """The files/setup execs of an open, as JSON (``sandbox_execs``, ``sandbox_execs_dropped``)."""
    if not execs or not execs.items:
        return {}
    return {"sandbox_execs": [e.model_dump(mode="json") for e in execs.items],
            "sandbox_execs_dropped": execs.dropped}


async def run_close(rt: WorkerRuntime, handle: str) -> dict[str, Any]:
    return await rt.close_sandbox(handle)


async def run_network(rt: WorkerRuntime, handle: Any, request: Any) -> dict[str, Any]:
    """Change a sandbox's network policy: ``{"network_mode": mode, "host": ...}`` or ``{"error": ...}``."""
    from .egress import EgressPolicy

    host = rt.config.host
    try:
        if not isinstance(handle, str) or not isinstance(request, dict):
            raise AdmissionRefused("This worker refuses a malformed sandbox network request.")
        mode, hosts = admit_network(rt.admission, request.get("network_mode"), request.get("allowed_hosts", []))
        await rt.sandboxes.set_network(handle, EgressPolicy(mode=mode, allowed_hosts=tuple(hosts)))
    except AdmissionRefused as exc:
        log.warning("worker.network_refused", host=host, reason=str(exc))
        return {"error": {"type": "PolicyRefused", "message": str(exc)}, "host": host}  # the wire's name, kept
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as data
        log.warning("worker.network_failed", host=host, error=str(exc))
        return {"error": {"type": type(exc).__name__, "message": str(exc)}, "host": host}
    log.info("worker.network_changed", host=host, sandbox=handle, mode=mode)
    return {"network_mode": mode, "host": host}


log_ack_errors = logging.getLogger("toolfleet.worker.ack")


class FleetRequest(Request):
    """Celery's request, whose late ack survives the broker connection it came on being gone.

    A call that runs through a Redis restart finishes on a channel whose connection Celery has
    already collected; kombu then raises AttributeError (not a connection error) from the ack and
    Celery stops the worker. There is nothing left to ack on a dead connection (a restarted Redis
    lost the message; otherwise the visibility timeout redelivers it and the call memory answers),
    so treat it as acked. The outcome is stored by the result backend independently of the ack.
    """

    acknowledged: bool  # Celery's own attribute (its Request carries no types)

    def acknowledge(self) -> None:
        # Same as Celery's, except that the (deferred) ack also tolerates the AttributeError.
        if not self.acknowledged:
            self._on_ack(log_ack_errors, (*self._connection_errors, AttributeError))
            self.acknowledged = True


_REQUEST = f"{FleetRequest.__module__}:{FleetRequest.__name__}"


def register_tasks(app: Celery, runtimes: Runtimes) -> None:
    """The task bodies, on ``runtimes`` (also what this app's cancel control command reaches)."""
    from ._worker_logging import connect_log_level

    connect_log_level()  # structlog lines at the worker's --loglevel, not all of them
    app.conf.toolfleet_runtimes = runtimes

    @app.task(name=names.TASK_CALL, bind=True, acks_late=True, Request=_REQUEST)
    def call(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
        rt = runtimes.get()
        task_id = self.request.id
        cap = _payload_too_large(app, payload)
        if cap is not None:
            return _error_outcome(str(payload.get("call_id", task_id)), rt.config.host, "limit",
                                  f"The tool call's arguments exceeded the payload limit of {cap} bytes.")
        timeout = call_timeout(payload.get("timeout") if isinstance(payload, dict) else None,
                               rt.config.max_call_seconds)
        bound = (timeout or rt.config.max_call_seconds) + 2 * rt.config.call_grace
        try:
            return rt.submit(run_call(rt, payload, task_id), timeout=bound)
        except CallRunningElsewhere:
            raise Ignore from None  # the first execution stores the result under this task id
        except TimeoutError:
            return _error_outcome(task_id, rt.config.host, "timeout", "Command timed out before completing.")

    @app.task(name=names.TASK_STAGE, bind=True, acks_late=True, ignore_result=True, Request=_REQUEST)
    def stage(self: Any, reply: Any, payloads: Any) -> None:
        """A stage's calls for this host: outcomes go to ``reply`` (no Celery result is stored)."""
        rt = runtimes.get()
        if not names.is_reply_channel(reply) or not isinstance(payloads, list) \
                or not 0 < len(payloads) <= names.MAX_STAGE_CALLS:
            rejects.reject("malformed stage", self.request.delivery_info.get("routing_key"), f"stage {self.request.id}")
            return None
        timeouts = [call_timeout(p.get("timeout") if isinstance(p, dict) else None, rt.config.max_call_seconds)
                    for p in payloads]
        bound = max(t or rt.config.max_call_seconds for t in timeouts) + 2 * rt.config.call_grace
        try:
            rt.submit(run_stage(rt, reply, payloads, self.request.id, _payload_cap(app)), timeout=bound)
        except TimeoutError:  # the orchestrator's own deadline (the call's timeout + call_grace) came first
            log.warning("worker.stage_timeout", task_id=self.request.id, calls=len(payloads))
        return None

    @app.task(name=names.TASK_OPEN_SANDBOX, bind=True, acks_late=True, Request=_REQUEST)
    def open_sandbox(self: Any, payload: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
        rt = runtimes.get()
        cap = _payload_too_large(app, payload)
        if cap is not None:
            return {"error": {"type": "limit",
                              "message": f"The sandbox spec (files, setup) exceeded the payload limit of {cap} bytes."},
                    "host": rt.config.host}
        if rt.redis is not None and not rt.submit(first_consumption(rt.redis, self.request.id, rt.config.replay),
                                                  timeout=30):
            rejects.reject("replayed", self.request.delivery_info.get("routing_key"), f"open_sandbox {self.request.id}")
            raise Ignore  # a copy of a consumed open (a replay): nothing opened, nothing stored
        try:
            return rt.submit(run_open(rt, payload, owner), timeout=rt.config.open_timeout)
        except TimeoutError as exc:
            return {"error": {"type": "TimeoutError", "message": str(exc)}, "host": rt.config.host}

    @app.task(name=names.TASK_SANDBOX_NETWORK, bind=True, acks_late=True, Request=_REQUEST)
    def sandbox_network(self: Any, handle: Any, request: Any) -> dict[str, Any]:
        rt = runtimes.get()
        first = rt.submit(first_consumption(rt.redis, self.request.id, rt.config.replay), timeout=30) \
            if rt.redis is not None else True
        if not first:
            rejects.reject("replayed", self.request.delivery_info.get("routing_key"),
                           f"sandbox_network {self.request.id}")
            raise Ignore  # a copy of a consumed change (a replay): it must not undo a later phase's policy
        try:
            return rt.submit(run_network(rt, handle, request), timeout=rt.config.open_timeout)
        except TimeoutError as exc:
            return {"error": {"type": "TimeoutError", "message": str(exc)}, "host": rt.config.host}

    @app.task(name=names.TASK_CLOSE_SANDBOX, bind=True, acks_late=True, Request=_REQUEST)
    def close_sandbox(self: Any, handle: str) -> dict[str, Any]:
        rt = runtimes.get()
        try:
            return rt.submit(run_close(rt, handle), timeout=rt.config.open_timeout)
        except TimeoutError as exc:
            return {"error": {"type": "TimeoutError", "message": str(exc)}, "host": rt.config.host}


@control_command(args=[("call_ids", list)], signature="<call_id> [call_id ...]")
def toolfleet_cancel(state: Any, call_ids: list[str], mac: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Cancel running toolfleet calls by id (Celery control command; runs in the consumer thread).
    Only when signed with the fleet secret: control messages are not otherwise authenticated."""
    runtimes = getattr(state.consumer.app.conf, "toolfleet_runtimes", None)
    rt = runtimes.current if runtimes is not None else None
    ids = [str(c) for c in call_ids] if isinstance(call_ids, list) else []
    if rt is None or rt.keyring is None or not verify_cancel(rt.keyring, mac, ids):
        rejects.reject("unauthenticated cancel", None)
        return {"error": "unauthenticated"}
    rt.cancel_calls(ids)
    return {"ok": f"cancelling {len(ids)} call(s)"}
