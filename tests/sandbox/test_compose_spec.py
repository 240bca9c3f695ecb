"""Inspect's compose form, read for the subset that maps (pure tables: no Docker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.util._compose import ComposeError, config_from_compose, parse_duration
from workers.sandbox import sandbox_config

IMG = "toolfleet/sandbox:latest"


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("250us", 0.00025), (3, 3.0), (0.5, 0.5),
])
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "1x", "s", "1s junk", "-1s"])
def test_unreadable_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="unreadable duration"):
        parse_duration(bad)


# (compose document, which container is the default, its image, the services' names)
DEFAULTS = [
    ({"services": {"default": {"image": "a"}, "web": {"image": "b"}}}, "default", "a", ["web"]),
    ({"services": {"web": {"image": "b"}, "box": {"image": "a", "x-default": True}}}, "box", "a", ["web"]),
    ({"services": {"first": {"image": "a"}, "second": {"image": "b"}}}, "first", "a", ["second"]),
    ({"services": {"solo": {"image": "a"}}}, "solo", "a", []),
]


@pytest.mark.parametrize(("doc", "default", "image", "others"), DEFAULTS)
def test_the_default_service(doc: dict, default: str, image: str, others: list[str]) -> None:
    config = config_from_compose(doc)
    assert (config.default_service, config.image, sorted(config.services)) == (default, image, others)


def test_fields_that_map() -> None:
    config = config_from_compose(yaml.safe_load(f"""
services:
  default:
    image: {IMG}
    command: tail -f /dev/null
    user: sandbox
    working_dir: /work
    environment: {{A: 1, B: null}}
    mem_limit: 2g
    cpus: 1.5
    network_mode: none
    depends_on: [db]
    x-local: true
  db:
    image: {IMG}
    command: postgres -c fsync=off
    entrypoint: ["docker-entrypoint.sh"]
    environment: [POSTGRES_PASSWORD=pw, EMPTY=]
    deploy: {{resources: {{limits: {{memory: 256m, cpus: "0.25", pids: 64}}}}}}
    healthcheck:
      test: ["CMD-SHELL", "pg_isready", "-q"]
      interval: 2s
      timeout: 1500ms
      retries: 5
      start_period: 1m
"""))
    assert (config.user, config.working_dir, config.environment, config.mem_limit, config.cpus) == \
        ("sandbox", "/work", {"A": "1", "B": ""}, "2g", 1.5)
    db = config.services["db"]
    assert db.command == ["postgres", "-c", "fsync=off"] and db.entrypoint == ["docker-entrypoint.sh"]
    assert db.environment == {"POSTGRES_PASSWORD": "pw", "EMPTY": ""}
    assert (db.mem_limit, db.cpus, db.pids_limit) == ("256m", 0.25, 64)
    assert db.healthcheck is not None
    assert (db.healthcheck.test, db.healthcheck.interval, db.healthcheck.timeout, db.healthcheck.retries,
            db.healthcheck.start_period) == ("pg_isready -q", 2.0, 1.5, 5, 60.0)


@pytest.mark.parametrize(("test", "expected"), [
    (["CMD", "curl", "-f", "http://x"], ["curl", "-f", "http://x"]),
    (["CMD-SHELL", "curl -f http://x || exit 1"], "curl -f http://x || exit 1"),
    ("curl -f http://x", "curl -f http://x"),
    (["NONE"], None),
])
def test_healthcheck_tests(test: Any, expected: Any) -> None:
    config = config_from_compose({"services": {"default": {"image": "a"},
                                               "web": {"image": "b", "healthcheck": {"test": test}}}})
    check = config.services["web"].healthcheck
    assert (check.test if check else None) == expected


# (compose document, what the one-line error says)
REFUSED = [
    ({"services": {}}, "needs a 'services' mapping"),
    ("just text", "needs a 'services' mapping"),
    ({"services": {"default": {"build": "."}}}, "'build' is not supported: build the image first"),
    ({"services": {"default": {"image": "a", "ports": ["80:80"]}}}, "'ports' is not supported"),
    ({"services": {"default": {"image": "a"}, "w": {"image": "b", "volumes": ["/:/host"]}}}, "service 'w': 'volumes'"),
    ({"services": {"default": {"image": "a", "privileged": True}}}, "'privileged' is not supported"),
    ({"services": {"default": {"image": "a", "cap_add": ["SYS_ADMIN"]}}}, "'cap_add' is not supported"),
    ({"services": {"default": {"image": "a", "network_mode": "host"}}}, "network_mode 'host'"),
    ({"services": {"default": {"image": "a", "shm_size": "1g"}}}, "'shm_size' is not supported by toolfleet"),
    ({"services": {"default": {"image": "a"}}, "networks": {"x": {}}}, "top-level 'networks' is not supported"),
    ({"services": {"a": {"image": "a", "x-default": True}, "b": {"image": "b", "x-default": True}}},
     "several services"),
    ({"services": {"default": {"image": "a"}, "bad_name": {"image": "b"}}}, "is not a hostname"),
    ({"services": {"default": {"image": "a"}, "w": {"image": "b", "healthcheck": {"test": "x", "interval": "soon"}}}},
     "unreadable duration"),
]


@pytest.mark.parametrize(("doc", "says"), REFUSED)
def test_what_does_not_map_is_refused_in_one_line(doc: Any, says: str) -> None:
    with pytest.raises(ComposeError) as caught:
        config_from_compose(doc, "compose.yaml")
    assert says in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("compose.yaml: ")


def test_the_pair_form_reads_the_file_relative_to_the_task(tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text(f"services:\n  default:\n    image: {IMG}\n  web:\n    image: {IMG}\n")
    config = sandbox_config(("docker", "compose.yaml"), base_dir=tmp_path)
    assert config.type == "docker" and list(config.services) == ["web"]
    assert sandbox_config(("docker", {"image": IMG, "pool_size": 0})).pool_size == 0
    with pytest.raises(ComposeError, match="No such file"):
        sandbox_config(("docker", "missing.yaml"), base_dir=tmp_path)
    with pytest.raises(ValueError, match="configures a 'docker' sandbox"):
        sandbox_config(("local", "compose.yaml"), base_dir=tmp_path)
