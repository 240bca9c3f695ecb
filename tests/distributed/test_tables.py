"""Pure logic of the distributed layer, by tables (no services)."""

from __future__ import annotations

import random

import pytest

from workers import _names
from workers.heartbeat import HostRecord
from workers.placement import choose_hosts


def _host(name: str, slots: int, draining: bool = False) -> HostRecord:
    return HostRecord(host=name, queue=_names.host_queue(name), node=_names.worker_nodename(name), boot="b",
                      slots=slots, draining=draining)


@pytest.mark.parametrize(
    ("hosts", "used", "expected"),
    [
        ([], {}, []),
        ([_host("a", 4), _host("b", 4)], {"a": 3, "b": 1}, ["b", "a"]),  # most free slots first
        ([_host("a", 4), _host("b", 4)], {"a": 4, "b": 1}, ["b"]),  # a full host is not a candidate
        ([_host("a", 8), _host("b", 2)], {"a": 1}, ["b", "a"]),  # an idle host before a busy bigger one
        ([_host("a", 8), _host("b", 2)], {}, ["a", "b"]),  # both idle: the most free slots first
        ([_host("a", 8, draining=True), _host("b", 1)], {}, ["b"]),  # draining hosts take no sandboxes
        ([_host("a", 0)], {}, []),  # slots=0: calls only
        ([_host("a", 2)], {"a": 5}, []),  # over-counted (a race): still full
    ],
)
def test_choose_hosts(hosts, used, expected) -> None:
    assert [h.host for h in choose_hosts(hosts, used, random.Random(0))] == expected


def test_hosts_with_the_image_only_unless_none_has_it() -> None:
    a, b = _host("a", 8), _host("b", 8).model_copy(update={"images": ["img:1"]})
    assert [h.host for h in choose_hosts([a, b], {"b": 7}, random.Random(0), image="img:1")] == ["b"]
    assert [h.host for h in choose_hosts([a, b], {"b": 8}, random.Random(0), image="img:1")] == []  # b full: wait
    assert [h.host for h in choose_hosts([a, b], {}, random.Random(0), image="other:1")] == ["a", "b"]


def test_ties_are_spread_between_orchestrators() -> None:
    hosts = [_host(n, 4) for n in "abcd"]
    firsts = {choose_hosts(hosts, {}, random.Random(seed))[0].host for seed in range(40)}
    assert len(firsts) > 1


def test_host_record_round_trips_through_a_redis_hash() -> None:
    record = _host("h1", 16, draining=True).model_copy(update={"sandboxes": 3, "running": 7, "ts": 12.5})
    raw = {k.encode(): v.encode() for k, v in record.to_hash().items()}
    assert HostRecord.from_hash(raw) == record


@pytest.mark.parametrize(
    ("queue", "host"),
    [(_names.host_queue("w-1"), "w-1"), (_names.host_queue("a.b.c"), "a.b.c"), (_names.SHARED_QUEUE, None), (None, None)],
)
def test_queue_names_round_trip(queue, host) -> None:
    assert _names.host_of_queue(queue) == host


def test_dispatcher_config_is_tagged_and_strict() -> None:
    from orchestrator.dispatch import CeleryDispatcherConfig

    config = CeleryDispatcherConfig(broker_url="redis://x:1/0")
    assert config.type == "celery"
    with pytest.raises(ValueError):
        CeleryDispatcherConfig(broker_url="redis://x:1/0", call_grace=-1)
    with pytest.raises(ValueError):
        CeleryDispatcherConfig(broker_url="redis://x:1/0", call_grace_s=1)  # a typo is an error, not ignored
