"""What the suite needs from the machine, provided or failed loudly — never skipped.

``toolfleet setup`` (the README's test command runs it first) installs redis-server and docker-registry
and builds the sandbox images; these fixtures check for them and fail with one line naming the fix when something
is still missing (a developer running pytest alone on a bare machine).
"""

from __future__ import annotations

import shutil

import pytest

IMAGE = "toolfleet/sandbox:latest"
BASE_IMAGE = "toolfleet/debian-base:bookworm"
SETUP_HINT = "run `toolfleet setup` (README, command 2)"


def require_redis_server() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(f"redis-server is not installed: {SETUP_HINT} or `apt-get install redis-server`", pytrace=False)
    return binary


def require_docker_registry() -> str:
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail(f"docker-registry is not installed: {SETUP_HINT} or `apt-get install docker-registry`",
                    pytrace=False)
    return binary


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The default sandbox image exists (built here, cached by tag, when `toolfleet setup` was skipped)."""
    from orchestrator.cli._setup_cmd import SetupError, ensure_images

    try:
        ensure_images(force=False)
    except SetupError as exc:
        pytest.fail(f"{exc} ({SETUP_HINT})", pytrace=False)
    return IMAGE


@pytest.fixture(autouse=True)
def _docker_marked_tests_have_the_image(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("sandbox_image")
