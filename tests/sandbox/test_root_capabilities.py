"""Root as Docker gives it, on a real ``toolfleet worker`` started with ``--allow-root-user``: a root sandbox
keeps Docker's default capabilities, so it installs a package it downloaded from the (test) internet with
``apt-get``, ``chown``s files and reads another user's 0700 files; a sandbox of any other user on the same
worker keeps every capability dropped. The download goes through the sandbox's ``public`` policy, with
the test internet's range allowed by the operator (``--egress-allow``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import SampleRoute
from tests.distributed._helpers import bash_request, one
from tests.support.fleet import Fleet
from tests.support.internet import ALLOWED_RANGE, DEB_FILE, LocalInternet
from tests.support.prerequisites import IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.celery, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def internet(sandbox_image: str) -> Iterator[LocalInternet]:
    with LocalInternet() as started:
        yield started


@pytest.fixture
async def dispatcher(fleet: Fleet) -> AsyncIterator[Any]:
    from orchestrator.dispatch import CeleryDispatcher

    fleet.worker(imports=(), allow_local=False, extra_args=(
        "--allow-root-user", "--allow-network", "public", "--egress-allow", ALLOWED_RANGE))
    d = CeleryDispatcher(fleet.url)
    yield d
    await d.aclose()


async def sh(d: Any, route: SampleRoute, cmd: str) -> str:
    assert route.sandbox is not None
    outcome = await one(d, bash_request(cmd, route.sandbox), route, bound=300)
    assert outcome.error is None and outcome.fatal is None, outcome
    return str(outcome.result)


async def test_a_root_sandbox_installs_chowns_and_reads_what_root_may(dispatcher: Any, internet: LocalInternet):
    d = dispatcher
    root = await d.open_sandbox(SandboxSpec(eval_id="caps", sample_id="root", config={
        "type": "docker", "image": IMAGE, "user": "root", "network_mode": "public", "pool_size": 0}))
    try:
        fetch = (f"import urllib.request as u; open('/tmp/tbtool.deb', 'wb').write("
                 f"u.urlopen('{internet.url}/{DEB_FILE}', timeout=30).read())")
        out = await sh(d, root, f"python3 -c \"{fetch}\" && apt-get install -y /tmp/tbtool.deb >/tmp/apt.log 2>&1; "
                                "echo apt=$?; dpkg -s tbtool | grep '^Status'; tbtool")
        assert "apt=0" in out and "Status: install ok installed" in out, out
        assert any(r.path == f"/{DEB_FILE}" for r in internet.requests())  # it came from the test internet
        out = await sh(d, root, "touch /tmp/handoff && chown 1000:1000 /tmp/handoff && stat -c %u:%g /tmp/handoff")
        assert out.strip().splitlines()[-1] == "1000:1000", out
        # The sandbox user's private directory and file (0700 / 0600), then root reads them.
        await sh(d, root, "setpriv --reuid=1000 --regid=1000 --clear-groups sh -c "
                          "'mkdir -m 700 /tmp/alice && echo the owl flies at midnight > /tmp/alice/secret "
                          "&& chmod 600 /tmp/alice/secret'")
        out = await sh(d, root, "stat -c '%a %u' /tmp/alice /tmp/alice/secret; cat /tmp/alice/secret")
        assert out.strip().splitlines() == ["700 1000", "600 1000", "the owl flies at midnight"], out
    finally:
        await d.close_sandbox(root)
    plain = await d.open_sandbox(SandboxSpec(eval_id="caps", sample_id="plain", config={
        "type": "docker", "image": IMAGE, "pool_size": 0}))
    try:
        out = await sh(d, plain, "id -u; grep CapBnd /proc/self/status; chown 0 /tmp 2>&1; echo chown=$?")
        assert out.splitlines()[0] == "1000" and "CapBnd:\t0000000000000000" in out and "chown=1" in out, out
    finally:
        await d.close_sandbox(plain)
