"""Misconfiguration must fail loudly, in one line, within seconds.

Before: a worker with a different secret made the eval hang with no message (only the worker logged
a rejection); ``eval-retry`` of a run whose broker URL had a password failed with Redis's "invalid
username-password pair"; the README put the Redis password in argv. Now: workers PUBLISH each
rejection (``toolfleet:fleet-events``), the orchestrator's listener hears it and the eval stops with one
line naming the cause; eval-retry takes the URL from ``TOOLFLEET_BROKER`` and says so when it is
missing. Real redis-server, real worker processes, the CLI as users run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import pytest

from orchestrator.dispatch._fleet_events import FleetEvent, expired_in_queue, parse_event, rejection_line
from orchestrator.eval import eval_async
from orchestrator.eval._errors import EvalSetupError, FleetMisconfiguredError
from orchestrator.eval._retry_broker import broker_for_retry
from tests.support.fleet import REPO_ROOT, RedisServer, WorkerProcess, ensure_fleet_secret
from workers.fleet import load_keyring

pytestmark = [pytest.mark.celery, pytest.mark.timeout(240)]

BASIC = str(REPO_ROOT / "tests" / "eval" / "tasks" / "basic.py")


def _cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def redis_server():  # type: ignore[no-untyped-def]
    ensure_fleet_secret()
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_a_worker_with_another_secret_stops_the_eval_with_one_line(redis_server, tmp_path: Path) -> None:
    """Found at preflight, from the key ids its heartbeat lists (its rejections are not signed with this
    orchestrator's secret, so they could not be told from a forgery: they alone stop nothing)."""
    secret = "another-teams-secret-" + uuid.uuid4().hex
    worker = WorkerProcess(redis_server.url, secret=secret).start()
    try:
        started = time.monotonic()
        result = _cli("eval", f"{BASIC}@sandboxed", "--model", "scripted/bash_then_answer", "-T", "n=3",
                      "-T", "sandbox=local", "--broker", redis_server.url, "--log-dir", str(tmp_path), "--display",
                      "none",
                      env=dict(os.environ))
        elapsed = time.monotonic() - started
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1, result.stderr
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        theirs, ours = (load_keyring(x).signing_id for x in (secret, os.environ["TOOLFLEET_SECRET"]))
        assert lines[0].endswith(f"No live worker accepts this orchestrator's messages: worker host '{worker.host}' "
                                 f"holds another fleet secret (key id {theirs}; this orchestrator signs with {ours}): "
                                 "set the same TOOLFLEET_SECRET (or TOOLFLEET_SECRET_FILE) on both."), lines[0]
        assert elapsed < 100  # bounded by the subprocess timeout anyway; a silent hang waits 300 s per open
    finally:
        worker.cleanup()


@pytest.mark.parametrize(("skew", "named"), [(600, "in the future (clock skew"), (-1200, "expired (issued 1200 s ago")],
                         ids=["ahead", "behind"])
async def test_clock_skew_stops_the_eval_naming_the_clocks(redis_server, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, skew, named) -> None:
    """This (the orchestrator's) host's clock runs 10 minutes ahead of the worker's, or 20 minutes behind
    it (its messages look expired on arrival: no queue made them old, so they are not sent again)."""
    import workers.app

    worker = WorkerProcess(redis_server.url).start()
    skewed = types.SimpleNamespace(time=lambda: time.time() + skew, monotonic=time.monotonic)
    monkeypatch.setattr(workers.app, "time", skewed)
    try:
        with pytest.raises(FleetMisconfiguredError) as info:
            await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer", task_args={"n": 2, "sandbox": "local"},
                             broker=redis_server.url, log_dir=tmp_path, display="none")
        message = str(info.value)
        assert named in message and "sync clocks (NTP)" in message and "\n" not in message
    finally:
        worker.cleanup()


def test_eval_retry_takes_the_password_from_the_environment(redis_server, tmp_path: Path) -> None:
    password = uuid.uuid4().hex
    redis_server.client().config_set("requirepass", password)
    url = redis_server.url.replace("redis://", f"redis://:{password}@")
    worker = WorkerProcess(url).start()
    try:
        env = {**os.environ, "TOOLFLEET_BROKER": url}
        done = _cli("eval", f"{BASIC}@basic", "--model", "scripted/echo", "-T", "n=2", "--log-dir", str(tmp_path),
                    "--display", "none", env=env)
        assert done.returncode == 0, done.stderr
        [log] = list(tmp_path.glob("*.jsonl"))
        assert password not in log.read_text() and ":***@" in log.read_text()
        bare = {k: v for k, v in os.environ.items() if k != "TOOLFLEET_BROKER"}
        missing = _cli("eval-retry", str(log), "--display", "none", env=bare)
        assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
        assert "set TOOLFLEET_BROKER to its full URL" in missing.stderr and "invalid username" not in missing.stderr
        retried = _cli("eval-retry", str(log), "--display", "none", env=env)
        assert retried.returncode == 0, retried.stderr
    finally:
        worker.cleanup()


# --- pure tables ------------------------------------------------------------------------------------------

RETRY_BROKERS = {
    "no password recorded": (("redis://h:6379/0", None, {}), "redis://h:6379/0"),
    "redacted, from env": (("redis://:***@h:6379/0", None, {"TOOLFLEET_BROKER": "redis://:pw@h:6379/0"}), "redis://:pw@h:6379/0"),
    "the flag wins": (("redis://:***@h:6379/0", "redis://:x@h2/0", {"TOOLFLEET_BROKER": "redis://:pw@h/0"}), "redis://:x@h2/0"),
    "embedded run": ((None, None, {"TOOLFLEET_BROKER": "redis://:pw@h/0"}), None),
}


@pytest.mark.parametrize(("args", "expected"), RETRY_BROKERS.values(), ids=RETRY_BROKERS.keys())
def test_broker_for_retry(args, expected) -> None:
    assert broker_for_retry(*args) == expected


def test_broker_for_retry_says_what_is_missing() -> None:
    with pytest.raises(EvalSetupError, match="set TOOLFLEET_BROKER"):
        broker_for_retry("redis://:***@h:6379/0", None, {})


@pytest.mark.parametrize("data", [b"junk", b"[]", b'{"kind": "rejected"}', b'{"kind": 1, "host": "h", "task_id": "t"}'])
def test_malformed_fleet_events_are_ignored(data) -> None:
    assert parse_event(data) is None


@pytest.mark.parametrize(("age", "expected"), [('"950.5"', 950.5), ("12", 12.0), ('"nan"', None), ('"inf"', None),
                                              ('"old"', None), ("null", None), ("[1]", None)])
def test_a_rejections_age_is_a_finite_number_or_none(age, expected) -> None:
    event = parse_event(f'{{"kind": "rejected", "host": "w1", "task_id": "t", "age": {age}}}')
    assert event is not None and event.age == expected


EXPIRED = "stale: expired (issued 950 s ago, limit 900 s; or clock skew)"
QUEUE_OR_CLOCK = {
    # (reason, the age the worker measured, seconds this host says it waited since publishing) -> send again?
    "waited in the queue": ((EXPIRED, 950.0, 951.0), True),
    "clocks 50 s apart": ((EXPIRED, 950.0, 900.0), True),
    "clocks just past the skew bound": ((EXPIRED, 950.0, 889.0), False),
    "worker's clock 20 min ahead": ((EXPIRED, 1200.0, 0.5), False),
    "no age (an older worker)": ((EXPIRED, None, 5000.0), False),
    "from the future": (("stale: issued 600 s in the future (clock skew over 60 s)", 600.0, 5000.0), False),
    "not stale at all": (("unauthenticated", 950.0, 951.0), False),
}


@pytest.mark.parametrize(("case", "requeue"), QUEUE_OR_CLOCK.values(), ids=QUEUE_OR_CLOCK.keys())
def test_expired_in_queue_tells_a_long_queue_from_a_wrong_clock(case, requeue) -> None:
    reason, age, waited = case
    event = FleetEvent(kind="rejected", host="w1", task_id="t", reason=reason, age=age)
    assert expired_in_queue(event, waited, max_skew=60.0) is requeue


def test_rejection_lines_name_the_cause() -> None:
    def line(reason: str) -> str:
        return rejection_line(
            parse_event(f'{{"kind": "rejected", "host": "w1", "task_id": "t", "reason": "{reason}"}}'))

    assert "TOOLFLEET_SECRET" in line("unauthenticated")
    assert "NTP" in line("stale: issued 600 s in the future (clock skew over 60 s)")
    assert line("sent to another queue").startswith("Worker host 'w1' rejects")
