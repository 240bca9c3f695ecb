"""The DNS filter: the only resolver a sandbox with a network can use, on its bridge's gateway.

Each sandbox network gets a UDP and a TCP listener on ``<gateway>:53`` (Docker's embedded resolver,
127.0.0.11 in the containers, forwards every name that is not a service of the sandbox there, from
the container's own network namespace). A query for a name the sandbox's policy allows is forwarded
to the host's resolvers; any other gets NXDOMAIN. For an ``allowlist`` sandbox the A/AAAA answers are
handed to ``on_answers`` (the enforcer adds them, with their TTL, to the set its rules accept) before
the reply leaves, so the connection that follows the lookup is already allowed.

Bounded per sandbox: queries in flight (more are dropped, as a busy resolver drops them), TCP
connections, time per query and per idle TCP connection. Everything is released by ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import structlog

from ._errors import EgressError

__all__ = ["DnsFilter", "DnsLimits", "SandboxDns", "parse_resolv_conf"]

log = structlog.get_logger("toolfleet.egress")

# (sandbox key, [(address, ttl seconds)]) -> when the addresses are allowed.
AnswerSink = Callable[[str, list[tuple[str, int]]], Awaitable[None]]


def parse_resolv_conf(text: str) -> list[tuple[str, int]]:
    """The ``nameserver`` entries of a resolv.conf, as (address, 53)."""
    servers = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            servers.append((fields[1].split("%")[0], 53))
    return servers


@dataclass(frozen=True)
class DnsLimits:
    upstream_timeout: float = 3.0
    inflight: int = 64          # per sandbox: queries being answered at once (UDP beyond it is dropped)
    tcp_connections: int = 8    # per sandbox
    tcp_idle: float = 10.0
    min_ttl: int = 30           # an answer stays allowed at least this long (TTL 0 would expire at once)
    max_ttl: int = 3600


@dataclass(frozen=True)
class SandboxDns:
    """What one sandbox's listener answers: ``allows_name(name)``; ``track``: hand the answers' addresses
    to the sink (allowlist); ``admits(address)``: whether an address is worth tracking (not denied)."""

    key: str
    address: str
    allows_name: Callable[[str], bool]
    track: bool = False
    admits: Callable[[str], bool] = field(default=lambda _a: True)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, owner: _Listener) -> None:
        self.owner = owner
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # a datagram endpoint's

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.owner.spawn(self._reply(data, addr))

    async def _reply(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = await self.owner.answer(data, udp=True)
        if reply is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(reply, addr)


class _Listener:
    """One sandbox's UDP and TCP listeners and the work they started."""

    def __init__(self, dns_filter: DnsFilter, sandbox: SandboxDns) -> None:
        self.filter = dns_filter
        self.sandbox = sandbox
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.udp: asyncio.DatagramTransport | None = None
        self.tcp: asyncio.Server | None = None

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if len(self.tasks) >= self.filter.limits.inflight:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def answer(self, wire: bytes, udp: bool) -> bytes | None:
        return await self.filter.answer(self.sandbox, wire, udp)

    async def serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.writers) >= self.filter.limits.tcp_connections:
            writer.close()
            return
        self.writers.add(writer)
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(2), self.filter.limits.tcp_idle)
                wire = await asyncio.wait_for(reader.readexactly(int.from_bytes(head, "big")),
                                              self.filter.limits.tcp_idle)
                reply = await self.answer(wire, udp=False)
                if reply is None:
                    break
                writer.write(len(reply).to_bytes(2, "big") + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def start(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        address = self.sandbox.address
        try:
            self.udp, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), local_addr=(address, port))
            self.tcp = await asyncio.start_server(lambda r, w: self.spawn_tcp(r, w), host=address, port=port)
        except OSError as exc:
            await self.stop()
            raise EgressError(f"the DNS filter cannot listen on {address}:{port}: {exc.strerror or exc}") from exc

    def spawn_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self.serve_tcp(reader, writer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def stop(self) -> None:
        if self.udp is not None:
            self.udp.close()
        if self.tcp is not None:
            self.tcp.close()
        for writer in list(self.writers):
            writer.close()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.tcp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.tcp.wait_closed(), 5)


class DnsFilter:
    """The listeners of every sandbox of one enforcer; ``upstreams`` are the resolvers it asks."""

    def __init__(self, upstreams: Sequence[tuple[str, int]], on_answers: AnswerSink,
                 limits: DnsLimits | None = None, port: int = 53) -> None:
        if not upstreams:
            raise EgressError("the DNS filter has no upstream resolver (no nameserver in /etc/resolv.conf)")
        self.upstreams = list(upstreams)
        self.on_answers = on_answers
        self.limits = limits or DnsLimits()
        self.port = port
        self._listeners: dict[str, _Listener] = {}

    def __len__(self) -> int:
        return len(self._listeners)

    async def serve(self, sandbox: SandboxDns) -> None:
        listener = _Listener(self, sandbox)
        await listener.start(self.port)
        self._listeners[sandbox.key] = listener

    async def stop(self, key: str) -> None:
        listener = self._listeners.pop(key, None)
        if listener is not None:
            await listener.stop()

    async def aclose(self) -> None:
        for key in list(self._listeners):
            await self.stop(key)

    async def _forward(self, query: dns.message.Message) -> dns.message.Message | None:
        for host, port in self.upstreams:
            try:
                reply = await dns.asyncquery.udp(query, host, timeout=self.limits.upstream_timeout, port=port,
                                                 ignore_unexpected=True)
                if reply.flags & dns.flags.TC:
                    reply = await dns.asyncquery.tcp(query, host, timeout=self.limits.upstream_timeout, port=port)
                return reply
            except (dns.exception.DNSException, OSError, EOFError) as exc:
                log.debug("egress.dns_upstream_failed", upstream=f"{host}:{port}", error=str(exc))
        return None

    def _tracked(self, sandbox: SandboxDns, reply: dns.message.Message) -> list[tuple[str, int]]:
        lo, hi = self.limits.min_ttl, self.limits.max_ttl
        return [(rdata.address, min(hi, max(lo, rrset.ttl)))
                for rrset in reply.answer if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
                for rdata in rrset if sandbox.admits(rdata.address)]

    async def answer(self, sandbox: SandboxDns, wire: bytes, udp: bool) -> bytes | None:
        """The reply to one query from the sandbox (None: drop it, as for a message that is not DNS)."""
        try:
            query = dns.message.from_wire(wire)
        except (dns.exception.DNSException, ValueError):
            return None
        if query.flags & dns.flags.QR:
            return None
        reply: dns.message.Message | None
        if query.opcode() != dns.opcode.QUERY or len(query.question) != 1:
            reply = dns.message.make_response(query)
            reply.set_rcode(dns.rcode.REFUSED)
        elif not sandbox.allows_name(query.question[0].name.to_text(omit_final_dot=True)):
            reply = dns.message.make_response(query)
            reply.set_rcode(dns.rcode.NXDOMAIN)
        else:
            reply = await self._forward(query)
            if reply is not None and sandbox.track and (answers := self._tracked(sandbox, reply)):
                try:
                    await self.on_answers(sandbox.key, answers)
                except EgressError as exc:  # a full set, a released sandbox: the address stays unreachable
                    log.warning("egress.dns_allow_failed", key=sandbox.key, error=str(exc))
                    reply = None
            if reply is None:
                reply = dns.message.make_response(query)
                reply.set_rcode(dns.rcode.SERVFAIL)
        limit = max(512, query.payload if query.edns >= 0 else 512) if udp else 65535
        try:
            return reply.to_wire(max_size=limit)
        except dns.exception.TooBig:
            truncated = dns.message.make_response(query)
            truncated.flags |= dns.flags.TC
            return truncated.to_wire()
