"""Pulls by pull policy against a real registry (Debian's ``docker-registry`` on loopback, started here).

Images are built FROM the sandbox image with a file that tells them apart (``/etc/toolfleet-pulltest``),
pushed to ``127.0.0.1:PORT/toolfleet/pulltest:<tag>`` and removed locally, so the driver has to pull:

- ``missing`` pulls an absent image; ``never`` refuses with one sentence; a missing tag, an unreachable
  registry: one sentence each;
- after a new push to the same tag, ``missing`` keeps the local (old) image, ``always`` gets the new one,
  and a warm spare of the old image is never handed out;
- a real ``toolfleet worker`` without ``--registry`` refuses to pull (and says which flag would allow it);
  with it, it pulls, and placement prefers it over a worker that cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import uuid
from collections.abc import Iterator

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dataset import Sample
from orchestrator.eval._preflight import PreflightError, preflight
from orchestrator.util._sandbox import SandboxUnavailableError
from tests.support.fleet import free_port
from tests.support.prerequisites import IMAGE
from tests.support.registry import local_registry  # noqa: F401  (fixture)
from workers.sandbox import SandboxImageError, build_driver, sandbox_config

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

MARKER = "/etc/toolfleet-pulltest"


@pytest.fixture
def docker_client(sandbox_image: str) -> Iterator[object]:
    import docker

    client = docker.from_env(timeout=120)
    yield client
    client.close()


class Images:
    """Builds and pushes test images; removes every tag and image it made at teardown."""

    def __init__(self, client, registry: str) -> None:  # type: ignore[no-untyped-def]
        self.client = client
        self.registry = registry
        self.refs: set[str] = set()
        self.ids: set[str] = set()

    def ref(self, name: str = "pulltest") -> str:
        ref = f"{self.registry}/toolfleet/{name}:{uuid.uuid4().hex[:8]}"
        self.refs.add(ref)
        return ref

    def build(self, ref: str, marker: str) -> str:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (("Dockerfile", f"FROM {IMAGE}\nCOPY marker {MARKER}\n"), ("marker", marker + "\n")):
                info = tarfile.TarInfo(name)
                info.size = len(data.encode())
                tar.addfile(info, io.BytesIO(data.encode()))
        buf.seek(0)
        for event in self.client.api.build(fileobj=buf, custom_context=True, tag=ref, rm=True, decode=True):
            assert "error" not in event, event
        image_id = self.client.api.inspect_image(ref)["Id"]
        self.ids.add(image_id)
        return image_id

    def push(self, ref: str) -> None:
        repo, tag = ref.rsplit(":", 1)
        for event in self.client.api.push(repo, tag=tag, stream=True, decode=True):
            assert "error" not in event, event

    def publish(self, ref: str, marker: str, keep_local: str | None = None) -> str:
        """Push an image with ``marker`` as ``ref``; locally, ``ref`` then names ``keep_local`` (an image
        id) or nothing. Returns the pushed image's id."""
        image_id = self.build(ref, marker)
        self.push(ref)
        repo, tag = ref.rsplit(":", 1)
        if keep_local is None:
            self.client.api.remove_image(ref)
        else:
            self.client.api.tag(keep_local, repo, tag, force=True)
        return image_id

    def present(self, ref: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.client.api.inspect_image(ref)
            return True
        except ImageNotFound:
            return False

    def cleanup(self) -> None:
        from docker.errors import DockerException

        for name in [*self.refs, *self.ids]:
            with contextlib.suppress(DockerException):
                self.client.api.remove_image(name, force=True)


@pytest.fixture
def images(docker_client, local_registry) -> Iterator[Images]:  # type: ignore[no-untyped-def]  # noqa: F811 - the imported fixture
    made = Images(docker_client, local_registry.host)
    yield made
    made.cleanup()


async def _marker(driver) -> str:  # type: ignore[no-untyped-def]
    env = await driver.create()
    try:
        return (await env.read_file(MARKER)).strip()
    finally:
        await driver.destroy(env)


async def test_missing_pulls_an_absent_image_and_never_refuses(images: Images) -> None:
    ref = images.ref()
    await asyncio.to_thread(images.publish, ref, "one")
    assert not images.present(ref)

    never = build_driver(sandbox_config({"type": "docker", "image": ref, "pool_size": 0, "pull_policy": "never"}))
    try:
        with pytest.raises(SandboxImageError) as caught:
            await never.create()
    finally:
        await never.aclose()
    assert str(caught.value) == (f"Sandbox image '{ref}' is not on this Docker host and its pull_policy is 'never': "
                                 "pull or build it there, or use pull_policy 'missing'.")
    assert not images.present(ref)

    missing = build_driver(sandbox_config({"type": "docker", "image": ref, "pool_size": 0}))  # the default policy
    try:
        assert await _marker(missing) == "one"
    finally:
        await missing.aclose()
    assert images.present(ref)


async def test_a_failed_pull_is_one_sentence(images: Images) -> None:
    absent = images.ref("never-pushed")
    unreachable = f"127.0.0.1:{free_port()}/toolfleet/pulltest:1"  # nothing listens there
    expected = {
        # Docker says "manifest unknown" or "pull access denied ..., repository does not exist or may require
        # 'docker login'" for the same absent repository, depending on its version and the registry's answer.
        absent: f"Sandbox image '{absent}' was not found in registry '{images.registry}' (check its name and tag",
        unreachable: f"Registry '{unreachable.split('/')[0]}' is unreachable, so sandbox image '{unreachable}' "
                     "cannot be pulled (",
    }
    for image, message in expected.items():
        driver = build_driver(sandbox_config({"type": "docker", "image": image, "pool_size": 0}))
        try:
            with pytest.raises(SandboxImageError) as caught:
                await driver.create()
        finally:
            await driver.aclose()
        assert str(caught.value).startswith(message), str(caught.value)
        assert "\n" not in str(caught.value)


async def test_always_picks_up_a_new_push_and_missing_keeps_the_old(images: Images) -> None:
    ref = images.ref()
    await asyncio.to_thread(images.publish, ref, "one")
    first = build_driver(sandbox_config({"type": "docker", "image": ref, "pool_size": 0}))
    try:
        assert await _marker(first) == "one"
    finally:
        await first.aclose()
    one = (await asyncio.to_thread(images.client.api.inspect_image, ref))["Id"]
    # The registry now has "two" under the same tag; this host still has "one".
    await asyncio.to_thread(images.publish, ref, "two", keep_local=one)

    missing = build_driver(sandbox_config({"type": "docker", "image": ref, "pool_size": 0, "pull_policy": "missing"}))
    try:
        assert await _marker(missing) == "one"
    finally:
        await missing.aclose()

    # `always`, with a warm spare: the spare made before a newer push is not handed out.
    always = build_driver(sandbox_config({"type": "docker", "image": ref, "pool_size": 1, "pull_policy": "always"}))
    try:
        assert await _marker(always) == "two"
        await always.pool.wait_full(60)  # a spare of "two"
        two = (await asyncio.to_thread(images.client.api.inspect_image, ref))["Id"]
        await asyncio.to_thread(images.publish, ref, "three", keep_local=two)
        assert await _marker(always) == "three"
        assert await _marker(always) == "three"
    finally:
        await always.aclose()


@pytest.mark.celery
async def test_a_worker_pulls_only_from_its_registries(images: Images, fleet) -> None:  # type: ignore[no-untyped-def]
    import redis

    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
    from tests.distributed._helpers import bash_request, one
    from workers.fleet import HostRecord, names

    ref = images.ref()
    await asyncio.to_thread(images.publish, ref, "one")
    allow_image = ("--image", f"{images.registry}/toolfleet/*")
    config = {"type": "docker", "image": ref, "pool_size": 0}
    refuses = fleet.worker(slots=2, extra_args=allow_image)
    with pytest.raises(PreflightError) as failed:  # found before any sample starts
        await preflight(None, [Sample(input="x", id="s1", sandbox=config)], embedded=False, broker_url=fleet.redis.url)
    assert str(failed.value) == (f"Docker image '{ref}' (sample s1) is on none of the 1 live worker(s), and none pulls "
                                 f"from its registry '{images.registry}' "
                                 f"(start one with --registry {images.registry}): "
                                 "build or pull it where the workers run.")
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.redis.url, placement_wait=5.0))
    try:
        with pytest.raises(SandboxUnavailableError) as caught:
            await d.open_sandbox(SandboxSpec(eval_id="e-pull", sample_id="refused", config=config))
        assert (f"Sandbox image '{ref}' is not on this Docker host and its registry '{images.registry}' is not one "
                f"this worker pulls from (start the worker with --registry {images.registry}") in str(caught.value)
        assert not images.present(ref)

        pulls = fleet.worker(slots=2, extra_args=(*allow_image, "--registry", images.registry))
        record = HostRecord.from_hash(redis.Redis.from_url(fleet.redis.url).hgetall(names.heartbeat_key(pulls.host)))
        assert record.registries == [images.registry]
        await preflight(None, [Sample(input="x", id="s1", sandbox=config)], embedded=False, broker_url=fleet.redis.url)
        for n in range(2):  # both idle: placement picks the worker that can pull, every time
            # Both workers share this Docker daemon: once pulled, an image is on both "hosts" (from the
            # next image refresh on), so each round asks for an image neither has.
            fresh = ref if n == 0 else images.ref()
            if n:
                await asyncio.to_thread(images.publish, fresh, "one")
            route = await d.open_sandbox(SandboxSpec(eval_id="e-pull", sample_id=f"pulled-{n}",
                                                     config={**config, "image": fresh}))
            try:
                assert route.host == pulls.host != refuses.host
                out = await one(d, bash_request(f"cat {MARKER}", route.sandbox), route)
                assert out.result.strip() == "one", out
            finally:
                await d.close_sandbox(route)
    finally:
        await d.aclose()


async def test_preflight_embedded_accepts_an_image_it_may_pull(images: Images) -> None:
    """Embedded mode pulls from the registry an image names: missing locally is fine unless 'never'."""
    ref = images.ref("not-pushed")  # preflight only looks locally: no registry involved
    await preflight(None, [Sample(input="x", id="s1", sandbox={"type": "docker", "image": ref})], embedded=True,
                    broker_url=None)
    with pytest.raises(PreflightError, match=f"Docker image '{ref}' \\(sample s1\\) is not on this machine"):
        await preflight(None, [Sample(input="x", id="s1", sandbox={"type": "docker", "image": ref,
                                                                   "pull_policy": "never"})],
                        embedded=True, broker_url=None)
    bare = "toolfleet/preflight-not-built:0"  # a bare name is never pulled: still an error
    with pytest.raises(PreflightError, match=f"Docker image '{bare}'"):
        await preflight(None, [Sample(input="x", id="s1", sandbox={"type": "docker", "image": bare})], embedded=True,
                        broker_url=None)


@pytest.mark.parametrize(
    ("engine_says", "sentence"),
    [
        ('Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused',
         "Registry '127.0.0.1:5999' is unreachable, so sandbox image '127.0.0.1:5999/t/x:1' cannot be pulled"),
        ("manifest for 127.0.0.1:5999/t/x:1 not found: manifest unknown: manifest unknown",
         "Sandbox image '127.0.0.1:5999/t/x:1' was not found in registry '127.0.0.1:5999' (check its name and tag)."),
        (("pull access denied for 127.0.0.1:5999/t/x, repository does not exist or may require 'docker login': "
          "denied: requested access to the resource is denied"),
         ("Sandbox image '127.0.0.1:5999/t/x:1' was not found in registry '127.0.0.1:5999' (check its name and tag; "
          "if the registry needs a login: `docker login 127.0.0.1:5999` on this host).")),
        ("unauthorized: authentication required",
         ("Registry '127.0.0.1:5999' does not allow pulling sandbox image '127.0.0.1:5999/t/x:1' (not logged in or no "
          "access: `docker login 127.0.0.1:5999` on this host).")),
        ("something\nodd", ("Pulling sandbox image '127.0.0.1:5999/t/x:1' from registry '127.0.0.1:5999' failed: "
          "something odd.")),
    ],
)
def test_pull_failures_read_as_one_sentence(engine_says: str, sentence: str) -> None:
    from workers.sandbox.docker._pull import pull_failure

    message = pull_failure("127.0.0.1:5999/t/x:1", engine_says)
    assert message.startswith(sentence) and "\n" not in message


async def test_a_service_image_is_pulled_by_the_sandbox_policy(images: Images) -> None:
    """A multi-service sandbox's service image follows the sandbox's pull_policy too."""
    ref = images.ref("pullservice")
    await asyncio.to_thread(images.publish, ref, "service-one")
    services = {"svc": {"image": ref, "command": ["sleep", "infinity"]}}
    never = build_driver(sandbox_config({"type": "docker", "pull_policy": "never", "services": services}))
    try:
        with pytest.raises(SandboxImageError) as caught:
            await never.create()
    finally:
        await never.aclose()
    assert str(caught.value).startswith(f"Service 'svc': Sandbox image '{ref}' is not on this Docker host")
    driver = build_driver(sandbox_config({"type": "docker", "services": services}))  # missing: pulled
    try:
        env = await driver.create()
        try:
            assert (await env.named_sandboxes()["svc"].read_file(MARKER)).strip() == "service-one"
        finally:
            await driver.destroy(env)
    finally:
        await driver.aclose()
    assert images.present(ref)
