"""Wait (bounded) until the broker answers and at least N worker hosts heartbeat, then exec a command.

    wait_for_fleet.py --workers 2 --timeout 120 -- toolfleet eval ...
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import redis


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--broker", default=os.environ.get("TOOLFLEET_BROKER", "redis://redis:6379/0"))
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    client = redis.Redis.from_url(args.broker, socket_timeout=2, socket_connect_timeout=2)
    deadline = time.monotonic() + args.timeout
    live = 0
    while time.monotonic() < deadline:
        try:
            hosts = [h.decode() for h in client.smembers("toolfleet:hosts")]
            live = sum(1 for h in hosts if client.exists(f"toolfleet:host:{h}"))
            if live >= args.workers:
                break
        except redis.RedisError:
            pass
        time.sleep(1)
    else:
        sys.exit(f"wait_for_fleet: {live}/{args.workers} worker hosts after {args.timeout:g} s")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command:
        os.execvp(command[0], command)  # noqa: S606 - the container's own command, after the wait


if __name__ == "__main__":
    main()
