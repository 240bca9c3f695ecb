"""A task's own tools on the fleet (docs/task-code.md): workers publish what they registered at start, preflight
names in one line any tool the eval would send to a worker lacking it, and the ways tool code gets onto a
worker (``--import`` of a module or of a task file, ``--path``, ``--install`` of a wheel) work on real
worker processes against a real Redis.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import redis as redis_sync

from orchestrator.dataset import Sample
from orchestrator.dispatch import CeleryDispatcher
from orchestrator.eval import Task, eval_async
from orchestrator.eval._preflight import PreflightError
from orchestrator.model import ModelOutput, get_model
from orchestrator.solver import generate, use_tools
from tests.distributed._helpers import one, request
from tests.support import task_code_tools
from tests.support.fleet import REPO_ROOT, SAMPLE_TOOLS, _wait, ensure_fleet_secret
from workers.fleet import ToolManifest

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]

USER_TOOLS = task_code_tools.__name__


def _manifest(url: str, host: str) -> ToolManifest | None:
    return ToolManifest.parse(redis_sync.Redis.from_url(url, socket_timeout=5).get(f"toolfleet:host:{host}:tools"))


def _grading_task(*tools) -> Task:  # type: ignore[no-untyped-def]
    return Task(dataset=[Sample(input="grade 42", target="done", id="s1")], solver=[use_tools(*tools), generate()])


def _grading_model():  # type: ignore[no-untyped-def]
    return get_model("scripted", outputs=[ModelOutput.for_tool_call("scripted", "grade", {"answer": "42"}), "done"])


# --- what a worker publishes --------------------------------------------------------------------------


def test_a_worker_publishes_its_tools_once_and_again_only_when_redis_lost_them(fleet) -> None:  # type: ignore[no-untyped-def]
    worker = fleet.worker(imports=(SAMPLE_TOOLS, USER_TOOLS))
    url, key = fleet.redis.url, f"toolfleet:host:{worker.host}:tools"
    manifest = _manifest(url, worker.host)
    assert manifest is not None and manifest.complete
    assert manifest.tools["grade"] == USER_TOOLS and manifest.tools["add"] == SAMPLE_TOOLS
    assert manifest.tools["bash"].startswith("orchestrator.tool._tools")  # the built-ins too
    client = fleet.redis.client()
    assert 0 < client.ttl(key) <= 3  # expires with the heartbeat (--heartbeat-ttl 3 in tests)

    # Not re-sent by each beat: a value put in its place (with a long TTL) has its TTL brought back to the
    # heartbeat's by the next beat, and its value left as it is.
    marker = ToolManifest(tools={"marker": "m"}).to_json()
    client.set(key, marker, ex=60)
    _wait(lambda: client.ttl(key) <= 3, 10, "a beat refreshing the manifest's TTL")
    assert client.get(key) == marker.encode()

    # Lost (a Redis restart, an outage past the TTL): the next beat writes it again.
    client.delete(key)
    _wait(lambda: client.exists(key), 10, "the manifest written again")
    assert _manifest(url, worker.host).tools["grade"] == USER_TOOLS  # type: ignore[union-attr]

    worker.terminate()
    assert not client.exists(key)  # a stopped worker takes its manifest with it


def test_manifest_is_bounded_and_a_bad_one_reads_as_unknown() -> None:
    big = ToolManifest.of({f"tool_{i:05d}": "some.rather.long.module.path.for.tools" for i in range(5000)})
    assert not big.complete and len(big.to_json()) <= 64 * 1024
    assert big.has("tool_00000") is True and big.has("not_listed") is None  # cut: it may have it
    assert ToolManifest.of({"a": "m"}).has("b") is False
    for raw in (b"not json", b'{"v": 99, "tools": {}}', b'{"tools": ["a"]}', b"x" * 200_000, None):
        assert ToolManifest.parse(raw) is None


# --- preflight ------------------------------------------------------------------------------------


async def test_preflight_names_a_tool_no_live_worker_has_before_any_sample(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fleet.worker()  # sample tools only: not the user's package
    with pytest.raises(PreflightError) as refused:
        await eval_async(_grading_task(task_code_tools.grade(), task_code_tools.lint(), task_code_tools.take_note()),
                         _grading_model(), broker=fleet.redis.url, log_dir=tmp_path, display="none")
    assert str(refused.value) == (
        f"Tools 'grade' (module {USER_TOOLS}) and 'lint' (module {USER_TOOLS}) are registered on no live worker: "
        f"start workers with --import {USER_TOOLS}.")  # take_note runs on the orchestrator: exempt
    assert not list(tmp_path.iterdir())  # no log: no sample started


async def test_preflight_refuses_a_tool_only_some_workers_have(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(imports=(SAMPLE_TOOLS, USER_TOOLS))
    without = fleet.worker()
    with pytest.raises(PreflightError) as refused:
        await eval_async(_grading_task(task_code_tools.grade()), _grading_model(), broker=fleet.redis.url,
                         log_dir=tmp_path, display="none")
    assert str(refused.value) == (
        f"Tool 'grade' (module {USER_TOOLS}) is not registered on 1 of the 2 live worker(s) ({without.host}), and a "
        f"sample's calls may go to any of them: start every worker with --import {USER_TOOLS}.")


async def test_preflight_passes_and_the_call_runs_on_a_worker_that_imported_the_module(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    worker = fleet.worker(imports=(SAMPLE_TOOLS, USER_TOOLS))
    [log] = await eval_async(_grading_task(task_code_tools.grade(), task_code_tools.take_note()), _grading_model(),
                             broker=fleet.redis.url, log_dir=tmp_path, display="none")
    assert log.status == "success", [s.error for s in log.samples]
    [event] = [e for e in log.samples[0].events if e.event == "tool"]
    assert event.result == f"graded 42 on {worker.host}"


async def test_a_worker_without_a_readable_list_is_not_held_against_a_tool(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A worker that publishes no list (an older version) or an unreadable one may have the tool: preflight
    judges by the workers it can read, and lets the eval start."""
    fleet.worker(imports=(SAMPLE_TOOLS, USER_TOOLS))
    older = fleet.worker(imports=(SAMPLE_TOOLS, USER_TOOLS))
    fleet.redis.client().set(f"toolfleet:host:{older.host}:tools", b"from an older worker: not a manifest",
                             keepttl=True)
    [log] = await eval_async(_grading_task(task_code_tools.grade()), _grading_model(), broker=fleet.redis.url,
                             log_dir=tmp_path, display="none")
    assert log.status == "success", [s.error for s in log.samples]


# --- getting the code onto workers ------------------------------------------------------------------

TASK_FILE = '''
import os

from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.solver import generate, use_tools
from orchestrator.tool import tool


@tool
def shout():
    async def execute(text: str) -> str:
        """Shout.

        Args:
            text: What to shout.
        """
        return f"{text.upper()} on {os.environ.get('TOOLFLEET_HOST', 'this process')}"

    return execute


@task
def loud():
    return Task(dataset=[Sample(input="shout hi", target="done", id="s1")], solver=[use_tools(shout()), generate()])
'''


async def test_a_task_files_own_tools_run_on_a_worker_started_with_import_of_the_file(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    task_file = tasks / "loud_task.py"
    task_file.write_text(TASK_FILE)
    model = get_model("scripted", outputs=[ModelOutput.for_tool_call("scripted", "shout", {"text": "hi"}), "done"])
    bare = fleet.worker()
    with pytest.raises(PreflightError) as refused:
        await eval_async(str(task_file), model, broker=fleet.redis.url, log_dir=tmp_path / "logs", display="none")
    expected = (f"Tool 'shout' (task file {task_file.resolve()}) is registered on no live worker: "
                f"start workers with --import {task_file.resolve()}.")
    assert str(refused.value) == expected
    # The same from the command line: one line, exit 1, nothing started.
    cli = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", str(task_file), "--model", "scripted",
                          "--broker", fleet.redis.url, "--log-dir", str(tmp_path / "cli-logs"), "--display", "none"],
                         capture_output=True, text=True, timeout=90, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert cli.returncode == 1 and cli.stderr.strip() == f"toolfleet: error: {expected}", cli.stderr
    assert not (tmp_path / "cli-logs").exists() or not list((tmp_path / "cli-logs").iterdir())
    bare.terminate()

    worker = fleet.worker(imports=(str(task_file),))
    [log] = await eval_async(str(task_file), get_model("scripted", outputs=[
        ModelOutput.for_tool_call("scripted", "shout", {"text": "hi"}), "done"]),
        broker=fleet.redis.url, log_dir=tmp_path / "logs", display="none")
    assert log.status == "success", [s.error for s in log.samples]
    [event] = [e for e in log.samples[0].events if e.event == "tool"]
    assert event.result == f"HI on {worker.host}"


def _wheel(directory: Path, module: str, source: str) -> Path:
    """A pure-Python wheel built by hand (no build tools needed, as on an offline worker host)."""
    name, version = "tfc_user_tools", "0.1"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{module}.py": source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: toolfleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(text)},{len(text.encode())}\n" for path, text in files.items())
    record += f"{dist}/RECORD,,\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in {**files, f"{dist}/RECORD": record}.items():
            whl.writestr(member, text)
    return path


WHEEL_MODULE = "tfc_wheel_tools"
WHEEL_SOURCE = textwrap.dedent('''
    from orchestrator.tool import tool


    @tool(parallel=True)
    def where_am_i():
        async def execute() -> str:
            """Say which file defines this tool."""
            return __file__

        return execute
''')


async def test_install_puts_a_wheel_on_a_worker_offline_in_a_directory_of_its_own(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wheel = _wheel(tmp_path, WHEEL_MODULE, WHEEL_SOURCE)
    worker = fleet.worker(imports=(), extra_args=("--install", str(wheel), "--import", WHEEL_MODULE))
    assert _manifest(fleet.redis.url, worker.host).tools["where_am_i"] == WHEEL_MODULE  # type: ignore[union-attr]
    d = CeleryDispatcher(fleet.redis.url)
    try:
        outcome = await one(d, request("where_am_i", module=WHEEL_MODULE))
    finally:
        await d.aclose()
    assert outcome.fatal is None and outcome.error is None, outcome
    installed = Path(str(outcome.result))
    assert installed.name == f"{WHEEL_MODULE}.py" and installed.parent.name.startswith("toolfleet-tools-")
    assert installed.exists()
    import importlib.util

    assert importlib.util.find_spec(WHEEL_MODULE) is None  # not installed into the shared environment
    worker.terminate()
    assert not installed.parent.exists()  # the worker's own directory goes with it


def _start(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    ensure_fleet_secret()
    return subprocess.run([sys.executable, "-m", "workers.cli", "--broker", "redis://127.0.0.1:1/0", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})


@pytest.mark.parametrize(("args", "env", "line"), [
    (["--import", "no_such_module_anywhere"], {},
     ("toolfleet worker: --import no_such_module_anywhere failed: ModuleNotFoundError: "
      "No module named 'no_such_module_anywhere'")),
    ([], {"TOOLFLEET_IMPORT": "tests.support.sample_tools, not_a_module_either"},
     ("toolfleet worker: --import not_a_module_either failed: ModuleNotFoundError: "
      "No module named 'not_a_module_either'")),
    (["--import", "/nonexistent/task.py"], {}, "toolfleet worker: --import /nonexistent/task.py: no such file"),
    (["--path", "/nonexistent/dir"], {}, "toolfleet worker: --path /nonexistent/dir: not a directory"),
    (["--install", "/etc/hostname"], {},
     ("toolfleet worker: --install /etc/hostname: not a wheel (.whl) or a directory holding wheels "
      "(build one with `pip wheel --no-deps -w dist .`)")),
])
def test_tool_code_that_cannot_load_stops_the_worker_in_one_line(
    args: list[str], env: dict[str, str], line: str) -> None:
    done = _start(args, **env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in done.stderr


def test_a_broken_wheel_is_one_line_from_pip(tmp_path: Path) -> None:
    broken = tmp_path / "broken-0.1-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    done = _start(["--install", str(broken)])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [last] = done.stderr.strip().splitlines()[-1:]
    assert last.startswith(f"toolfleet worker: --install {broken}: pip failed: ")


def test_path_makes_a_source_tree_importable(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    (src / "tfc_src_pkg").mkdir(parents=True)
    (src / "tfc_src_pkg" / "__init__.py").write_text("")
    (src / "tfc_src_pkg" / "tools.py").write_text(WHEEL_SOURCE)
    worker = fleet.worker(imports=(), extra_args=("--path", str(src), "--import", "tfc_src_pkg.tools"))
    assert _manifest(fleet.redis.url, worker.host).tools["where_am_i"] == "tfc_src_pkg.tools"  # type: ignore[union-attr]
