"""Module-scoped fixtures of the egress tests (imported by each test module that uses them): the Docker
client (its teardown removes what the run left), the test internet, a metadata stand-in at
169.254.169.254, a port Docker publishes, a DNS upstream with the test's names, and listeners on the
host's addresses (a worker stand-in, UDP, a real redis-server)."""

from __future__ import annotations

import socket
from typing import Any

import docker
import pytest
import redis
from docker.errors import APIError

from tests.security._egress_support import (
    HTTP_PORT,
    RUN,
    HostListeners,
    Internet,
    Upstream,
    primary_addresses,
    remove_leftovers,
    wait_for,
)

OWNER = f"egress-test-{RUN}"  # the enforcers' owner label in these tests (their networks are removed at the end)

__all__ = ["OWNER", "client", "internet", "listeners", "metadata", "pings", "published", "reachable_from_host",
           "upstream"]


@pytest.fixture(scope="module")
def client():
    c = docker.from_env(timeout=120)
    try:
        yield c
    finally:
        remove_leftovers(c, OWNER)
        c.close()


@pytest.fixture(scope="module")
def internet(client):
    net = Internet(client)
    try:
        yield net.start()
    finally:
        net.close()


@pytest.fixture(scope="module")
def metadata(internet):
    """A listener at 169.254.169.254 (port 8080), on a Docker network of its own, as a cloud's would be:
    routed off the host, not one of the host's addresses."""
    made: list[Any] = []

    def claimed() -> bool:  # the subnet is one: another egress test module's stand-in may still be going away
        try:
            made.append(internet.network("meta", "169.254.169.252/30"))
            return True
        except APIError as exc:
            if "overlap" not in str(exc).lower():
                raise
            return False

    wait_for(claimed, 60, "the metadata stand-in's subnet (169.254.169.252/30) to be free")
    internet.serve("meta", "metadata-stand-in", made, ip="169.254.169.254")
    wait_for(lambda: reachable_from_host("169.254.169.254"), 30, "the metadata stand-in")
    return "169.254.169.254"


@pytest.fixture(scope="module")
def published(internet, client):
    """A host port Docker publishes (DNAT to a container): the host's address, reached another way."""
    container = internet.serve("published", "published-port", [internet.network("pubport")],
                               ports={f"{HTTP_PORT}/tcp": ("0.0.0.0", None)})
    container.reload()
    port = int(container.attrs["NetworkSettings"]["Ports"][f"{HTTP_PORT}/tcp"][0]["HostPort"])
    host4, _ = primary_addresses()
    wait_for(lambda: reachable_from_host(host4, port), 30, "the published port")
    return port


def reachable_from_host(ip: str, port: int = HTTP_PORT) -> bool:
    try:
        socket.create_connection((ip, port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def upstream(internet):
    host4, _ = primary_addresses()
    server = Upstream({"internet.test": internet.public_ip, "*.wild.test": internet.public_ip,
                       "wild.test": internet.public_ip, "notlisted.test": internet.public_ip,
                       "mirror.test": internet.private_ip, "metadata.test": "169.254.169.254",
                       "host.test": host4})
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def listeners():
    found = HostListeners()
    try:
        host4, _ = primary_addresses()
        wait_for(lambda: pings(host4, found.redis_port), 10, "redis-server on the host's address")
        yield found
    finally:
        found.close()


def pings(host: str, port: int) -> bool:
    try:
        return bool(redis.Redis(host=host, port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False
