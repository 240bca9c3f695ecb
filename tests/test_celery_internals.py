"""The Celery and kombu internals the worker's app was written against (``workers/app.py``, ``workers/tasks.py``).

Those modules subclass Celery's result backend, request and consumer and kombu's Redis channel, QoS and
transport, and override methods that are not public API (``_store_result``, ``_put``, ``_brpop_read``,
``_create_client``, ``_deliver``, ...). ``pyproject.toml`` pins both libraries to the minor versions
tested; when that pin moves, this file says which override lost its base method or saw its signature
change, so the override is re-read against the new code instead of silently missing its call.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest
from celery.backends.redis import RedisBackend
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from kombu.transport import redis as kombu_redis

import workers.app
import workers.tasks

TESTED = {"celery": "5.7", "kombu": "5.7"}  # the minor versions this table was written against
OURS = (workers.app, workers.tasks)

# (base class, method, the base's signature our override was written against). Every method a class of
# ``OURS`` overrides is here (``test_the_table_covers_every_override``).
OVERRIDES: list[tuple[type, str, str]] = [
    (RedisBackend, "_store_result", "(self, task_id, result, state, traceback=None, request=None, **kwargs)"),
    (RedisBackend, "on_task_call", "(self, producer, task_id)"),
    (RedisBackend, "add_pending_result", "(self, result, weak=False, start_drainer=True)"),
    (RedisBackend, "remove_pending_result", "(self, result)"),
    (kombu_redis.QoS, "pipe_or_acquire", "(self, pipe=None, client=None)"),
    (kombu_redis.QoS, "append", "(self, message, delivery_tag)"),
    (kombu_redis.QoS, "ack", "(self, delivery_tag)"),
    (kombu_redis.Channel, "close", "(self)"),
    (kombu_redis.Channel, "_put", "(self, queue, message, **kwargs)"),
    (kombu_redis.Channel, "_brpop_read", "(self, **options)"),
    (kombu_redis.Channel, "_create_client", "(self, asynchronous=False)"),
    (kombu_redis.Transport, "register_with_event_loop", "(self, connection, loop)"),
    (kombu_redis.Transport, "_deliver", "(self, message, queue)"),
    (Consumer, "on_connection_error_after_connected", "(self, exc)"),
    (Request, "acknowledge", "(self)"),
]

# Private members of the bases the overrides call or read (not overridden, so not found by introspection).
CALLED: list[tuple[type, str, str]] = [
    (RedisBackend, "_get_result_meta", "(self, result, state, traceback, request, format_date=True, encode=False)"),
]
SLOTS: list[tuple[type, str]] = [(Request, "_on_ack"), (Request, "_connection_errors")]


def _library(base: type) -> str:
    return base.__module__.split(".")[0]


def _changed(base: type, what: str) -> str:
    lib = _library(base)
    return (f"{lib} {version(lib)} (toolfleet is tested with {lib} {TESTED[lib]}.x) {what}; re-read "
            f"{base.__module__}.{base.__qualname__} and the override in workers/, then update this table "
            "and the pin in pyproject.toml")


def _overrides() -> set[tuple[type, str]]:
    """(base class, method) for every method a class of ours defines that its library base also has."""
    found: set[tuple[type, str]] = set()
    for module in OURS:
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            bases = [b for b in cls.__mro__[1:] if _library(b) in TESTED]
            if not bases:
                continue
            for name, value in vars(cls).items():
                if name.startswith("__") or not inspect.isfunction(value):
                    continue
                if any(name in vars(b) for b in bases):
                    found.add((bases[0], name))
    return found


def test_the_table_covers_every_override() -> None:
    missing = sorted(f"{base.__qualname__}.{name}" for base, name in _overrides() - {(b, n) for b, n, _ in OVERRIDES})
    assert not missing, f"overrides of celery/kombu methods with no entry in OVERRIDES: {missing}"


@pytest.mark.parametrize(("base", "name", "signature"), OVERRIDES + CALLED,
                         ids=[f"{b.__qualname__}.{n}" for b, n, _ in OVERRIDES + CALLED])
def test_base_method_is_there_with_the_signature_we_were_written_against(base: type, name: str, signature: str) -> None:
    method = getattr(base, name, None)
    assert method is not None, _changed(base, f"has no {base.__qualname__}.{name} any more")
    now = str(inspect.signature(method))
    assert now == signature, _changed(base, f"changed {base.__qualname__}.{name}{signature} to {name}{now}")


@pytest.mark.parametrize(("base", "name"), SLOTS, ids=[f"{b.__qualname__}.{n}" for b, n in SLOTS])
def test_base_slot_is_there(base: type, name: str) -> None:
    slots = {s for cls in base.__mro__ for s in getattr(cls, "__slots__", ())}
    assert name in slots, _changed(base, f"has no {base.__qualname__}.{name} slot any more")


def test_installed_versions_are_the_tested_minors() -> None:
    for lib, minor in TESTED.items():
        assert version(lib).startswith(minor + "."), _changed(
            {"celery": RedisBackend, "kombu": kombu_redis.Channel}[lib], "is installed")
