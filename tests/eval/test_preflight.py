"""Preflight: each problem that would fail every sample is found once, before the first sample starts,
as one clear line (``PreflightError``; the CLI exits non-zero without a traceback); ``--no-preflight``
skips it."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.eval._policies import resolve_model
from orchestrator.eval._preflight import PreflightError, probe_model
from orchestrator.scorer import includes
from tests.support.fleet import free_port

pytestmark = pytest.mark.timeout(120)
MISSING = "toolfleet/preflight-does-not-exist:0"


def _task(sample_sandbox=None, sandbox=None) -> Task:  # type: ignore[no-untyped-def]
    return Task(dataset=[Sample(input="hi", target="hi", id="s1"),
                         Sample(input="hi", target="hi", id="s2", sandbox=sample_sandbox)],
                scorer=includes(), sandbox=sandbox)


def _no_log_written(log_dir: Path) -> bool:
    return not log_dir.exists() or not any(log_dir.iterdir())


async def test_sample_sandbox_without_type(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as caught:
        await eval_async(_task({"image": "toolfleet/sandbox:latest"}, "local"), "scripted", log_dir=tmp_path)
    assert str(caught.value).startswith("Sample 's2': sandbox {'image': 'toolfleet/sandbox:latest'} has no \"type\"")
    assert "\n" not in str(caught.value)
    assert _no_log_written(tmp_path)


async def test_sample_sandbox_with_a_bad_field(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match=r"Sample 's2': invalid sandbox .*memory_limit: Extra inputs"):
        await eval_async(_task({"type": "docker", "memory_limit": "1g"}, "local"), "scripted", log_dir=tmp_path)


@pytest.mark.slow  # runs a local sandbox or the CLI in a child process
async def test_no_preflight_leaves_it_to_the_sample(tmp_path: Path) -> None:
    [log] = await eval_async(_task({"image": "x"}, "local"), "scripted", log_dir=tmp_path, preflight=False)
    errors = {str(s.id): s.error for s in log.samples}
    assert errors["s1"] is None and errors["s2"] is not None


@pytest.mark.docker
async def test_missing_image_embedded(tmp_path: Path, sandbox_image: str) -> None:
    task = _task({"type": "docker", "image": MISSING, "pool_size": 0}, {"type": "docker", "image": sandbox_image})
    with pytest.raises(PreflightError) as caught:
        await eval_async(task, "scripted", log_dir=tmp_path)
    assert str(caught.value) == (f"Docker image '{MISSING}' (sample s2) is not on this machine: "
                                 f"build it or `docker pull {MISSING}`.")
    assert _no_log_written(tmp_path)


@pytest.mark.celery
async def test_no_live_worker(tmp_path: Path, own_redis) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PreflightError, match=r"No live worker on the broker .*: start one with `toolfleet worker"):
        await eval_async(_task(sandbox="local"), "scripted", log_dir=tmp_path, broker=own_redis.url)


@pytest.mark.celery
@pytest.mark.docker
async def test_image_on_no_live_worker(tmp_path: Path, fleet, sandbox_image: str) -> None:  # type: ignore[no-untyped-def]
    import redis

    from workers.fleet import HostRecord, names

    worker = fleet.worker(slots=2)
    record = HostRecord.from_hash(redis.Redis.from_url(fleet.redis.url).hgetall(names.heartbeat_key(worker.host)))
    assert sandbox_image in record.images  # workers report their images
    task = _task({"type": "docker", "image": MISSING}, {"type": "docker", "image": sandbox_image})
    with pytest.raises(PreflightError) as caught:
        await eval_async(task, "scripted", log_dir=tmp_path, broker=fleet.redis.url)
    assert str(caught.value) == (f"Docker image '{MISSING}' (sample s2) is on none of the 1 live worker(s): "
                                 "build or pull it where the workers run.")


class _ModelsHandler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # http.server's name
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]}
                          if self.status == 200 else {"error": {"message": "bad key"}}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def models_server() -> Iterator[tuple[str, type[_ModelsHandler]]]:
    handler = type("Handler", (_ModelsHandler,), {"status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


async def test_model_endpoint_answers(models_server) -> None:  # type: ignore[no-untyped-def]
    url, _ = models_server
    await probe_model(resolve_model("openai/m", base_url=url, api_key="k"))


async def test_model_endpoint_refuses_the_key(models_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = models_server
    handler.status = 401
    with pytest.raises(PreflightError, match=r"refused the API key \(401\)"):
        await probe_model(resolve_model("openai/m", base_url=url, api_key="k"))


async def test_model_endpoint_unreachable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(PreflightError, match=f"The model endpoint {url} does not answer"):
        await eval_async(_task(sandbox="local"), "openai/m", log_dir=tmp_path, model_args={"base_url": url})
    assert _no_log_written(tmp_path)


def _cli(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    task_file = tmp_path / "bad_sandbox.py"
    task_file.write_text(textwrap.dedent("""
        from orchestrator.dataset import Sample
        from orchestrator.eval import Task, task
        from orchestrator.scorer import includes

        @task
        def bad():
            return Task(dataset=[Sample(input="hi", target="hi", id="a", sandbox={"image": "x"})], scorer=includes())
    """))
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", str(task_file), "--model", "scripted",
                           "--log-dir", str(tmp_path / "logs"), "--display", "none", *extra],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.slow  # runs a local sandbox or the CLI in a child process
def test_cli_one_line_and_no_preflight(tmp_path: Path) -> None:
    failed = _cli(tmp_path)
    assert failed.returncode != 0
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert "Sample 'a': sandbox {'image': 'x'} has no \"type\"" in lines[0]

    skipped = _cli(tmp_path, "--no-preflight")  # the sample runs, and fails on its own
    assert skipped.returncode == 1
    assert "has no \"type\"" not in skipped.stderr
    assert "errored" in skipped.stdout


@pytest.mark.celery
async def test_no_live_worker_runs_local_sandboxes(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(slots=2, allow_local=False)
    with pytest.raises(PreflightError) as caught:
        await eval_async(_task(sandbox="local"), "scripted", log_dir=tmp_path, broker=fleet.redis.url)
    assert str(caught.value) == ("None of the 1 live worker(s) runs 'local' sandboxes "
                                 "(start a worker with --allow-local).")


@pytest.mark.celery
async def test_image_allowed_by_no_live_worker(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(slots=2)
    with pytest.raises(PreflightError) as caught:
        await eval_async(_task({"type": "docker", "image": "other/thing:1"}, "local"), "scripted",
                         log_dir=tmp_path, broker=fleet.redis.url)
    assert str(caught.value) == ("Docker image 'other/thing:1' (sample s2) is allowed by none of the 1 live worker(s) "
                                 "(their --image patterns: toolfleet/*): start workers with --image 'other/thing:1' "
                                 "or a pattern matching it.")


async def test_anthropic_endpoint_unreachable_and_reachable(tmp_path: Path) -> None:
    from tests.support.anthropic_server import AnthropicServer

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PreflightError, match=f"The model endpoint {url} does not answer .*ANTHROPIC_BASE_URL"):
        await eval_async(_task(sandbox="local"), "anthropic/m", log_dir=tmp_path,
                         model_args={"base_url": url, "api_key": "k"})
    assert _no_log_written(tmp_path)
    with AnthropicServer() as server:  # answers GET /v1/models with a status: reachable
        await probe_model(resolve_model("anthropic/m", base_url=server.base_url, api_key="k"))
