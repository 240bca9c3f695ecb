"""Reward 1 when the agent's download failed and a connection from here fails too; else 0 (with the reason)."""
import os
import socket
import urllib.parse
from pathlib import Path


def problems():
    url = os.environ.get("TB_INTERNET_URL", "")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        # Without a real address the download would fail for the wrong reason.
        yield f"TB_INTERNET_URL is not an http URL ({url!r}): nothing was tested"
        return
    status = Path("/app/status.txt")
    if not status.is_file() or status.read_text().strip() != "offline":
        said = status.read_text().strip() if status.is_file() else None
        yield f"/app/status.txt should say offline, it says {said!r}"
    if Path("/app/dataset.bin").exists():
        yield "/app/dataset.bin exists: something was downloaded"
    try:
        socket.create_connection((parts.hostname, parts.port or 80), timeout=5).close()
        yield f"the verifier connected to {parts.hostname}:{parts.port or 80}: this environment has network"
    except OSError as exc:
        print(f"connecting to {parts.hostname}:{parts.port or 80} failed, as it should: {exc}")


found = list(problems())
for problem in found:
    print(problem)
Path("/logs/verifier/reward.txt").write_text("0\n" if found else "1\n")
