import hashlib
import ipaddress
import json
import os
import socket
import urllib.parse
import urllib.request
from pathlib import Path

ALLOWED = ipaddress.ip_network("198.18.0.0/16")  # task.toml's allowed_hosts


def host_port(variable):
    parts = urllib.parse.urlsplit(os.environ[variable])
    return parts.hostname, parts.port or 80


def test_the_run_is_set_up_as_the_task_assumes():
    # Otherwise the other host could be unreachable for a reason that has nothing to do with the allowlist.
    assert ipaddress.ip_address(host_port("TB_INTERNET_URL")[0]) in ALLOWED
    assert ipaddress.ip_address(host_port("TB_OTHER_URL")[0]) not in ALLOWED


def test_download_from_the_allowed_host():
    url = os.environ["TB_INTERNET_URL"].rstrip("/") + "/manifest.json"
    with urllib.request.urlopen(url, timeout=60) as response:
        expected = json.load(response)["files"]["files/dataset-4m.bin"]["sha256"]
    assert hashlib.sha256(Path("/app/dataset.bin").read_bytes()).hexdigest() == expected


def test_other_host_found_blocked():
    assert Path("/app/other.txt").read_text().strip() == "blocked"


def test_other_host_blocked_for_the_verifier_too():
    host, port = host_port("TB_OTHER_URL")
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return
    raise AssertionError(f"connected to {host}:{port}, which the allowlist leaves out")
