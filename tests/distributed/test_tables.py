"""Pure logic of the distributed layer, by tables (no services)."""

from __future__ import annotations

import random

import pytest

from workers.fleet import HostRecord, choose_hosts, names


def _host(name: str, slots: int, draining: bool = False) -> HostRecord:
    return HostRecord(host=name, queue=names.host_queue(name), node=names.worker_nodename(name), boot="b",
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
    [(names.host_queue("w-1"), "w-1"), (names.host_queue("a.b.c"), "a.b.c"), (names.SHARED_QUEUE, None), (None, None)],
)
def test_queue_names_round_trip(queue, host) -> None:
    assert names.host_of_queue(queue) == host


def test_dispatcher_config_is_tagged_and_strict() -> None:
    from orchestrator.dispatch import CeleryDispatcherConfig

    config = CeleryDispatcherConfig(broker_url="redis://x:1/0")
    assert config.type == "celery"
    with pytest.raises(ValueError, match="call_grace"):
        CeleryDispatcherConfig(broker_url="redis://x:1/0", call_grace=-1)
    with pytest.raises(ValueError, match="call_grace_s"):
        CeleryDispatcherConfig(broker_url="redis://x:1/0", call_grace_s=1)  # a typo is an error, not ignored


# --- images on a fleet: which hosts have, or can pull, a sample's image -------------------------------

REG = "127.0.0.1:5000"
PULLED = f"{REG}/toolfleet/task:1"


def _img_host(name: str, slots: int = 4, images: tuple[str, ...] = (), registries: tuple[str, ...] = ()) -> HostRecord:
    return _host(name, slots).model_copy(update={"images": list(images), "registries": list(registries)})


@pytest.mark.parametrize(
    ("hosts", "used", "image", "policy", "expected"),
    [
        # has it, first; then can pull it (least loaded first within each group); a host that can do neither: never
        ([_img_host("a"), _img_host("b", registries=(REG,)), _img_host("c", images=(PULLED,))],
         {"c": 3}, PULLED, "missing", ["c", "b"]),
        # the host that has it is full: one that can pull it takes the sample now
        ([_img_host("a", registries=(REG,)), _img_host("c", images=(PULLED,))], {"c": 4}, PULLED, "missing", ["a"]),
        # 'always' pulls anyway: a host that has the image (its layers) still comes first
        ([_img_host("a", registries=(REG,)), _img_host("c", images=(PULLED,))], {}, PULLED, "always", ["c", "a"]),
        # 'never': only hosts that have it; pullers do not count
        ([_img_host("a", registries=(REG,)), _img_host("c", images=(PULLED,))], {}, PULLED, "never", ["c"]),
        # 'never' and nobody has it: any host (its worker says why it cannot)
        ([_img_host("a", registries=(REG,)), _img_host("b")], {"a": 1}, PULLED, "never", ["b", "a"]),
        # nobody has it, only b pulls from its registry
        ([_img_host("a", registries=("127.0.0.1:5001",)), _img_host("b", registries=(REG,))], {}, PULLED, "missing",
         ["b"]),
        # the only puller is full: wait for it rather than send the sample where it cannot run
        ([_img_host("a"), _img_host("b", registries=(REG,))], {"b": 4}, PULLED, "missing", []),
        # a bare name (no registry host) is never pulled: registries do not matter
        ([_img_host("a", registries=(REG,)), _img_host("b", images=("toolfleet/x:1",))], {"b": 1}, "toolfleet/x:1",
         "missing", ["b"]),
        # nobody has or can pull it: any host, least loaded first
        ([_img_host("a"), _img_host("b")], {"a": 2}, PULLED, "missing", ["b", "a"]),
        # draining hosts take nothing, even with the image
        ([_img_host("a", images=(PULLED,)).model_copy(update={"draining": True}), _img_host("b", registries=(REG,))],
         {}, PULLED, "missing", ["b"]),
    ],
)
def test_choose_hosts_by_image_and_pull_policy(hosts, used, image, policy, expected) -> None:
    chosen = choose_hosts(hosts, used, random.Random(0), image=image, pull_policy=policy)
    assert [h.host for h in chosen] == expected


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("toolfleet/sandbox:latest", None), ("python:3.12", None), ("ubuntu", None), ("team/app/sub:1", None),
        (f"{REG}/toolfleet/task:1", REG), ("localhost/x:1", "localhost"), ("localhost:5000/x", "localhost:5000"),
        (f"{REG}/team/x@sha256:" + "0" * 64, REG), ("127.0.0.1/x:1", "127.0.0.1"),
    ],
)
def test_image_registry(image: str, registry: str | None) -> None:
    from workers._admission import image_registry

    assert image_registry(image) == registry


@pytest.mark.parametrize(
    ("worker_registries", "asked", "image", "admitted"),
    [
        ([], "missing", PULLED, "never"),  # a worker pulls from no registry unless started with --registry
        ([REG], "missing", PULLED, "missing"),
        ([REG], "always", PULLED, "always"),
        ([REG], "never", PULLED, "never"),
        (["127.0.0.1:5001"], "always", PULLED, "never"),  # another registry
        ([REG], "missing", "toolfleet/x:1", "never"),  # a bare name is never pulled
    ],
)
def test_admission_narrows_pull_policy(worker_registries, asked, image, admitted) -> None:
    from workers._admission import AdmissionRules, admit_sandbox

    rules = AdmissionRules(images=["toolfleet/*", f"{REG}/toolfleet/*"], registries=worker_registries)
    config = admit_sandbox(rules, {"type": "docker", "image": image, "pull_policy": asked})
    assert config["pull_policy"] == admitted


def test_host_record_carries_its_registries() -> None:
    record = _img_host("h", registries=(REG,))
    raw = {k.encode(): v.encode() for k, v in record.to_hash().items()}
    assert HostRecord.from_hash(raw).registries == [REG]


# --- multi-service sandboxes take one slot per container -----------------------------------------

@pytest.mark.parametrize(("config", "weight"), [
    (None, 1),
    ({"type": "local"}, 1),
    ({"type": "docker", "image": "toolfleet/sandbox:latest"}, 1),
    ({"type": "docker", "services": {}}, 1),
    ({"type": "docker", "services": {"db": {"image": "a"}, "web": {"image": "b"}}}, 3),
])
def test_slot_weight(config: dict | None, weight: int) -> None:
    from workers.fleet import slot_weight

    assert slot_weight(config) == weight


def test_a_sandbox_goes_only_where_all_its_containers_fit() -> None:
    from workers.fleet import HostRecord, choose_hosts

    def rec(host: str, slots: int) -> HostRecord:
        return HostRecord(host=host, queue=f"q.{host}", node=host, boot="b", slots=slots)

    hosts = [rec("small", 2), rec("big", 4)]
    used = {"small": 0, "big": 2}
    assert [h.host for h in choose_hosts(hosts, used, weight=1)] == ["small", "big"]  # idle first
    assert [h.host for h in choose_hosts(hosts, used, weight=2)] == ["small", "big"]
    assert [h.host for h in choose_hosts(hosts, used, weight=3)] == []  # big has 2 free, small only 2 in all
    assert [h.host for h in choose_hosts(hosts, {"small": 1, "big": 0}, weight=3)] == ["big"]


def test_a_multi_service_sandbox_prefers_hosts_with_all_its_images() -> None:
    from workers.fleet import HostRecord, choose_hosts

    def rec(host: str, images: list[str], registries: list[str] | None = None) -> HostRecord:
        return HostRecord(host=host, queue=f"q.{host}", node=host, boot="b", slots=4, images=images,
                          registries=registries or [])

    hosts = [rec("app-only", ["app"]), rec("both", ["app", "db"]), rec("none", [])]
    idle = {h.host: 0 for h in hosts}
    assert [h.host for h in choose_hosts(hosts, idle, image=["app", "db"])] == ["both"]
    assert next(h.host for h in choose_hosts(hosts, idle, image=["app"])) in ("app-only", "both")
    assert {h.host for h in choose_hosts(hosts, idle, image=["app"])} == {"app-only", "both"}
    # A host that can pull the missing one comes after those that have both.
    pulling = [*hosts, rec("puller", ["app"], ["127.0.0.1:5000"])]
    ranked = [h.host for h in choose_hosts(pulling, {h.host: 0 for h in pulling}, image=["app", "127.0.0.1:5000/db:1"])]
    assert ranked == ["puller"]
    # Nobody can get them all: any host (its worker says why).
    assert len(choose_hosts(hosts, idle, image=["app", "nowhere"])) == 3


# --- slot leases (workers/fleet/_leases.py): how many to reserve ahead, which to hand out -------------------


@pytest.mark.parametrize(
    ("recent", "misses", "held", "asked", "cap", "room", "expected"),
    [
        (0, 0, 0, 0, 64, 256, 0),  # no demand: nothing reserved ahead
        (1, 0, 0, 0, 64, 256, 0),  # a key asked once is no stream: nothing (a one-off image leases nothing)
        (1, 1, 0, 0, 64, 256, 0),
        (2, 0, 0, 0, 64, 256, 2),  # the target is the recent demand
        (20, 0, 0, 0, 64, 256, 20),
        (2, 1, 0, 0, 64, 256, 2),  # slow start: 4 ** (misses - 1) if more than the demand
        (2, 2, 0, 0, 64, 256, 4),  # two reservations found the pool empty: 4 ahead
        (3, 3, 0, 0, 64, 256, 16),  # three did: 16
        (9, 6, 0, 0, 64, 256, 64),  # a burst reaches the cap within a few
        (100, 0, 0, 0, 64, 256, 64),  # capped per key
        (100, 0, 0, 0, 64, 10, 10),  # and by what the total bound leaves
        (40, 0, 30, 0, 64, 256, 0),  # at the low-water mark (three quarters of the target): not yet
        (40, 0, 29, 0, 64, 256, 11),  # below it: refilled to the target in one block
        (40, 0, 5, 25, 64, 256, 0),  # asks in flight count as held
        (40, 0, 5, 20, 64, 256, 15),
        (100, 9, 0, 0, 0, 256, 0),  # leasing off
        (5, 0, 10, 0, 64, 256, 0),  # more held than demand: nothing
    ],
)
def test_refill_size(recent: int, misses: int, held: int, asked: int, cap: int, room: int, expected: int) -> None:
    from workers.fleet._leases import refill_size

    assert refill_size(recent, misses, held, asked, cap, room) == expected


def test_keys_asked_for_once_are_forgotten_after_their_window() -> None:
    from workers.fleet._leases import Leases

    leases = Leases(per_key=8, window_s=1.0)
    most = 0
    for i in range(10_000):  # a distinct image per sample: 10,000 one-off keys over 10 s
        leases.asked(((f"task-{i}:1",), "missing", "e"), now=i / 1000)
        leases.missed(((f"task-{i}:1",), "missing", "e"), now=i / 1000)
        most = max(most, leases.keys)
    assert most <= 2 * 1000 + 1  # at most two windows' worth, however many keys go by
    leases.asked((None, "missing", "e"), now=20.0)
    assert leases.keys == 1  # every idle key forgotten: only the one asked now
    # A key holding leases is kept, whatever its age (the sweeper gives those back first).
    leases.answered((None, "missing", "e"), _lease("h"), refused=False, now=20.0)
    leases.asked((None, "missing", "other"), now=40.0)
    assert leases.keys == 2 and leases.held == 1


def test_lease_key() -> None:
    from workers.fleet._leases import lease_key

    assert lease_key(None, "missing", None) == (None, "missing", "")
    assert lease_key("img:1", "never", "e") == (("img:1",), "never", "e")
    assert lease_key(["a:1", "b:1"], "missing", "e") == (("a:1", "b:1"), "missing", "e")
    assert lease_key([], "missing", "e") == (None, "missing", "e")


def _lease(host: str, boot: str = "b", taken: float = 0.0):  # type: ignore[no-untyped-def]
    from workers.fleet._leases import Lease

    return Lease(host, boot, "e", taken, token=f"{host}-{taken}")


def test_leases_hand_out_the_oldest_usable_and_drop_the_rest() -> None:
    from workers.fleet._leases import Leases

    key = (None, "missing", "e")
    leases = Leases(per_key=8)
    for lease in [_lease("gone"), _lease("drains"), _lease("a", taken=2.0), _lease("restarted", "b0", taken=3.0)]:
        leases.answered(key, lease, refused=False, now=0.0)
    alive = {"drains": _host("drains", 4, draining=True), "a": _host("a", 4), "restarted": _host("restarted", 4)}
    got, gone = leases.take(key, alive)
    assert got == _lease("a", taken=2.0)
    assert [x.host for x in gone] == ["gone", "drains"]  # their host is not alive, or is draining
    assert leases.held == 1 and leases.hits == 1
    # A host that restarted since (another boot) keeps its leased slots: its leased set outlives it.
    assert leases.take(key, alive) == (_lease("restarted", "b0", taken=3.0), [])
    assert leases.take(key, alive) == (None, [])
    leases.answered(key, _lease("drains"), refused=False, now=4.0)
    leases.answered(key, _lease("a", taken=4.0), refused=False, now=4.0)
    assert leases.on_hosts(alive) == [_lease("drains")] and leases.held == 1  # a fresh list drops the same


def test_lease_pools_are_bounded_refused_keys_give_back_and_idle_leases_expire() -> None:
    from workers.fleet._leases import Leases

    a, b = (None, "missing", "a"), (None, "missing", "b")
    leases = Leases(per_key=2, total=3, idle_s=2.0, backoff_s=0.5)
    # per key
    assert [leases.answered(a, _lease("h", taken=t), False, t)[0] for t in (0.0, 1.0, 1.5)] == [True, True, False]
    assert [leases.answered(b, _lease("h", taken=t), False, t)[0] for t in (1.0, 1.0)] == [True, False]  # in total
    for _ in range(3):
        leases.asked(b, 1.0)
    assert leases.refills(1.0) == []  # at the total bound: nothing more asked
    # A refused lease ask (fair share: another eval waits) gives the key's whole pool back.
    kept, dropped = leases.answered(b, None, refused=True, now=1.2)
    assert not kept and len(dropped) == 1 and leases.held == 2
    leases.asked(b, 1.3)
    assert not leases.wants(b, 1.3) and leases.refills(1.3) == []  # backing off
    assert leases.refills(1.8) == []  # not asked for since the last check
    leases.asked(b, 1.8)
    assert leases.refills(1.8) == [(b, 1)]  # demand 2, but a's two held leave room for one in total
    assert leases.expired(2.5) == [_lease("h", taken=0.0)]  # held 2 s without being handed out
    assert leases.held == 1
    assert leases.drain() == [_lease("h", taken=1.0)] and leases.held == 0
    leases.closed = True
    assert leases.answered(b, _lease("h"), False, 3.0) == (False, [])  # closed: every answer goes back
    assert not leases.wants(b, 3.0)
