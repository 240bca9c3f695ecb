"""Runs inside a sandbox container (python3 of the sandbox image, as root with Docker's default
capabilities): each probe in the JSON list of argv[1] is one attempt to reach something; one JSON
object of results goes to stdout. Nothing here decides pass or fail: the test reads the results and
also asks the targets what they received.

Probes (``[kind, *args]``):
- ``["tcp", host, port]``: a TCP connection; ``ok`` or the error's name.
- ``["http", url]``: a GET; the body's first 200 bytes, or the error.
- ``["resolve", name]``: the addresses ``getaddrinfo`` gives, or the error.
- ``["udp", host, port, token]``: a datagram through an ordinary socket; the reply if one comes.
- ``["icmp", host]``: an echo request through a raw socket; ``reply``, ``unreachable`` or ``silent``.
- ``["raw4", host, port, token]`` / ``["raw6", host6, port, token]``: a UDP datagram built by hand (IP
  header and all) and sent as an Ethernet frame through an AF_PACKET socket to the gateway's MAC, as a
  sandbox that ignores the kernel's routing would; the reply (IPv4: from a socket bound to the source
  port) if one comes.
- ``["download", url]``: bytes and seconds of one GET read to the end.
- ``["gateway"]``: the default route's gateway (where the sandbox's network meets the host).
"""

import json
import os
import socket
import struct
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

TIMEOUT = float(os.environ.get("PROBE_TIMEOUT", "2"))


def _err(exc):
    return "error: " + (type(exc).__name__ + " " + str(exc)).strip()


def tcp(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=TIMEOUT):
            return "ok"
    except OSError as exc:
        return _err(exc)


def http(url):
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            return "body: " + resp.read(200).decode(errors="replace").strip()
    except Exception as exc:  # noqa: BLE001  (urllib wraps socket errors in URLError; the text is what matters)
        return _err(exc)


def download(url):
    start = time.monotonic()
    total = 0
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            while chunk := resp.read(1 << 20):
                total += len(chunk)
    except Exception as exc:  # noqa: BLE001 - the probe reports any failure as its result
        return _err(exc)
    return {"bytes": total, "seconds": time.monotonic() - start}


def resolve(name):
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)})
    except OSError as exc:
        return _err(exc)


def udp(host, port, token):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(TIMEOUT)
            s.sendto(token.encode(), (host, int(port)))
            return "reply: " + s.recv(200).decode(errors="replace")
    except OSError as exc:
        return _err(exc)


def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icmp(host):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as s:
            s.settimeout(0.2)
            body = struct.pack("!BBHHH", 8, 0, 0, 0x7466, 1) + b"toolfleet-probe"
            s.sendto(body[:2] + struct.pack("!H", _checksum(body)) + body[4:], (host, 0))
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                try:
                    packet, addr = s.recvfrom(2048)
                except TimeoutError:
                    continue
                kind = packet[(packet[0] & 0x0F) * 4]
                if kind == 0 and addr[0] == host:
                    return "reply"
                if kind == 3:
                    return "unreachable"
            return "silent"
    except OSError as exc:
        return _err(exc)


def gateway():
    with open("/proc/net/route") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == "00000000":
                return socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    return None


def _gateway_mac():
    gateway_ip = gateway()
    # An ordinary datagram to the gateway makes the kernel resolve its MAC (ARP stays on the bridge).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"", (gateway_ip, 9))
    for _ in range(50):
        with open("/proc/net/arp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[0] == gateway_ip and fields[3] != "00:00:00:00:00:00":
                    return bytes.fromhex(fields[3].replace(":", ""))
        time.sleep(0.05)
    raise OSError("the gateway's MAC did not resolve")


def _frame(ethertype, packet):
    with open("/sys/class/net/eth0/address") as f:
        own = bytes.fromhex(f.read().strip().replace(":", ""))
    return _gateway_mac() + own + struct.pack("!H", ethertype) + packet


def _own_ipv4():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet leaves: connect() on UDP only picks the source address
        return s.getsockname()[0]


def raw4(host, port, token):
    try:
        src = _own_ipv4()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as reply:
            reply.bind((src, 0))
            reply.settimeout(TIMEOUT)
            sport = reply.getsockname()[1]
            data = token.encode()
            udp_header = struct.pack("!HHHH", sport, int(port), 8 + len(data), 0)
            header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(data), 1, 0, 64, 17, 0,
                                 socket.inet_aton(src), socket.inet_aton(host))
            header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
                s.bind(("eth0", 0))
                s.send(_frame(0x0800, header + udp_header + data))
            try:
                return "reply: " + reply.recv(200).decode(errors="replace")
            except TimeoutError:
                return "sent, no reply"
    except OSError as exc:
        return _err(exc)


def raw6(host, port, token):
    try:
        src = socket.inet_pton(socket.AF_INET6, "fe80::7466:1")
        dst = socket.inet_pton(socket.AF_INET6, host)
        data = token.encode()
        length = 8 + len(data)
        pseudo = src + dst + struct.pack("!I3xB", length, 17)
        udp_header = struct.pack("!HHHH", 40000, int(port), length, 0)
        csum = _checksum(pseudo + udp_header + data) or 0xFFFF
        udp_header = udp_header[:6] + struct.pack("!H", csum)
        header = struct.pack("!IHBB", 6 << 28, length, 17, 64) + src + dst
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind(("eth0", 0))
            s.send(_frame(0x86DD, header + udp_header + data))
        return "sent"
    except OSError as exc:
        return _err(exc)


PROBES: dict[str, Callable[..., Any]] = {
    "tcp": tcp, "http": http, "resolve": resolve, "udp": udp, "icmp": icmp, "raw4": raw4, "raw6": raw6,
    "download": download, "gateway": gateway,
}

if __name__ == "__main__":
    results = [PROBES[kind](*args) for kind, *args in json.loads(sys.argv[1])]
    print(json.dumps(results))
