"""Bring up the stand-ins for Docker Hub and the internet by hand, to run ``examples/terminal-bench`` against them.

    python -m tests.support.stand_ins [--tasks examples/terminal-bench] [--hub-tags] [--state FILE] [--for 3600]

Starts a ``LocalRegistry`` seeded as Docker Hub (``HubMirror``: the stand-in base images and each task's
``docker_image``, built on the test internet's network so their builds can download) and a ``LocalInternet`` with
a published port; prints the variables and flags a run needs, writes them to ``--state`` (JSON) and to
``--env-file`` / ``--harbor-env-file`` (``KEY=VALUE`` lines), then holds until interrupted (Ctrl-C, SIGTERM) or
for ``--for`` seconds, and removes everything it made. ``--hub-tags`` also tags the seeded images locally under
their Docker Hub names (``ubuntu:24.04``), for a harness that cannot pull through a mirror (Harbor); ``--nonce``
gives the images new ids (a cold build: no build-cache hit).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from tests.support.hub import HubMirror
from tests.support.internet import LocalInternet
from tests.support.registry import LocalRegistry, daemon_allows_loopback_registries


def _write_env(path: Path, env: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in env.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.stand_ins", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, default=Path("examples/terminal-bench"),
                        help="Harbor task directories whose docker_image to seed (default: %(default)s)")
    parser.add_argument("--hub-tags", action="store_true", help="tag the seeded images under their Hub names")
    parser.add_argument("--nonce", default=str(int(time.time())), help="labels the seeded images (new ids)")
    parser.add_argument("--payload-mib", type=int, default=0, help="an extra layer of this size per stand-in")
    parser.add_argument("--state", type=Path, help="write addresses and flags here (JSON)")
    parser.add_argument("--env-file", type=Path, help="TB_* variables for a run on the internet's networks")
    parser.add_argument("--harbor-env-file", type=Path, help="TB_* variables with the published port (Harbor)")
    parser.add_argument("--for", dest="hold", type=float, default=3600.0, help="seconds to hold (default 3600)")
    args = parser.parse_args(argv)

    import docker

    client = docker.from_env(timeout=300)
    if not daemon_allows_loopback_registries(client):
        print("stand_ins: error: the Docker daemon does not allow plain-http registries on 127.0.0.1 "
              "(insecure-registries lacks 127.0.0.0/8)", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    registry = LocalRegistry()
    internet = LocalInternet(client, publish=True)
    hub = HubMirror(registry, client, nonce=args.nonce, payload_mib=args.payload_mib)
    try:
        registry.start()
        internet.start()
        began = time.monotonic()
        seeded = hub.seed(tasks=args.tasks, build_args=internet.env(), network=internet.network)
        seed_s = time.monotonic() - began
        local = hub.pull_as_hub() if args.hub_tags else []
        state = {
            "registry": registry.host, "seeded": seeded, "seed_seconds": round(seed_s, 1), "hub_tags": local,
            "network": internet.network, "other_network": internet.other_network,
            "env": internet.env(), "harbor_env": internet.host_env(),
            "toolfleet_flags": [f"--registry-mirror docker.io={registry.host}", f"--egress-allow {internet.address}",
                                f"--build-network {internet.network}", "--task-env TB_INTERNET_URL",
                                "--task-env TB_OTHER_URL"],
        }
        if args.state:
            args.state.write_text(json.dumps(state, indent=1) + "\n")
        if args.env_file:
            _write_env(args.env_file, internet.env())
        if args.harbor_env_file:
            _write_env(args.harbor_env_file, internet.host_env())
        print(json.dumps({"ready": state}), flush=True)
        stop.wait(args.hold)
    finally:
        hub.cleanup()
        internet.stop()
        registry.cleanup()
        print(json.dumps({"stopped": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
