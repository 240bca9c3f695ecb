"""Attacks from a Harbor task directory (a downloaded benchmark is a third party's data) on the orchestrator's host.

Before: ``instruction.md``, ``task.toml``, ``environment/`` and ``tests/`` given as symlinks were followed on the
host (a host file became the model's prompt; a host directory became the build context and was copied into
``/tests``); a FIFO in the build context hung the load; a 1 GiB context file was hashed and sent whole and a
64 MiB ``instruction.md`` read whole; ``${TOOLFLEET_SECRET}`` in the task's compose file was filled from the
orchestrator's environment into the sandbox, the eval log and the image history. Now each is one line at load,
naming the path inside the task, and nothing outside the task is read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.dataset import HarborTaskError, load_harbor
from orchestrator.dataset._harbor_tree import TaskTreeError

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "harbor" / "hello-world"
SECRET = "harbor-host-secret-5f1c0e"  # noqa: S105 - a marker to find, not a credential

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A host directory the task must never read: a private file and a would-be test suite."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "id_rsa").write_text(SECRET)
    (outside / "id_rsa").chmod(0o600)
    (outside / "test.sh").write_text(f"echo {SECRET}\n")
    (outside / "Dockerfile").write_text("FROM toolfleet/sandbox:latest\n")
    return outside


def _task(tmp_path: Path, name: str = "hello") -> Path:
    task = tmp_path / "tasks" / name
    shutil.copytree(HELLO, task)
    return task


def _refused(path: Path, match: str, **kwargs: object) -> str:
    with pytest.raises(HarborTaskError) as caught:
        _bounded(lambda: load_harbor(path, build=False, **kwargs))  # type: ignore[arg-type]
    line = str(caught.value)
    assert match in line and "\n" not in line and SECRET not in line, line
    return line


def _bounded(call: Callable[[], object], seconds: float = 60.0) -> object:
    """``call()`` in a thread, failing the test (not hanging it) if it does not return in time."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the load did not return within {seconds} s (a FIFO opened for reading?)"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


@pytest.mark.parametrize(("entry", "target", "match"), [
    ("instruction.md", "id_rsa", "instruction.md is a symlink"),
    ("task.toml", "id_rsa", "task.toml is a symlink"),
    ("environment", ".", "environment/ is a symlink"),
    ("tests", ".", "tests/ is a symlink"),
    ("solution", ".", "solution/ is a symlink"),
    ("environment/Dockerfile", "Dockerfile", "environment/: link 'Dockerfile' points outside the task directory"),
])
def test_symlinked_task_files_and_directories_are_refused(tmp_path: Path, host_secret: Path, sandbox_image: str,
                                                          entry: str, target: str, match: str) -> None:
    task = _task(tmp_path)
    victim = task / entry
    shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
    victim.symlink_to(host_secret / target if target != "." else host_secret, target_is_directory=target == ".")
    line = _refused(task, match)
    assert line.startswith("Harbor task 'hello' (")


@pytest.mark.parametrize(("where", "target"), [
    ("tests/leak", "/etc/passwd"),  # absolute
    ("tests/data/leak", "../../../host/id_rsa"),  # climbs out of the task
    ("environment/leak", "../../../host"),
])
def test_links_pointing_outside_are_refused(tmp_path: Path, host_secret: Path, sandbox_image: str, where: str,
                                            target: str) -> None:
    task = _task(tmp_path)
    (task / where).parent.mkdir(parents=True, exist_ok=True)
    (task / where).symlink_to(target)
    _refused(task, f"link '{where.split('/', 1)[1]}' points outside the task directory")


def test_a_link_inside_the_task_is_kept_as_a_link(tmp_path: Path, sandbox_image: str) -> None:
    task = _task(tmp_path)
    (task / "tests" / "again.sh").symlink_to("test.sh")
    loaded = load_harbor(task, build=False)
    assert [s.id for s in loaded.samples] == ["hello"]
    # A file the host reads itself is never read through a link, even one that stays inside the task.
    (task / "prompt.md").write_text("Say hello.")
    (task / "instruction.md").unlink()
    (task / "instruction.md").symlink_to("prompt.md")
    _refused(task, "instruction.md is a symlink")


def test_a_symlinked_task_directory_is_refused(tmp_path: Path, sandbox_image: str) -> None:
    real = _task(tmp_path / "elsewhere")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "hello").symlink_to(real, target_is_directory=True)
    (tmp_path / "tasks" / "other").mkdir()
    shutil.copytree(HELLO, tmp_path / "tasks" / "other", dirs_exist_ok=True)
    _refused(tmp_path / "tasks", "Harbor task 'hello'")


@pytest.mark.parametrize("where", ["environment/pipe", "instruction.md", "tests/pipe", "environment/Dockerfile"])
def test_a_fifo_is_refused_without_hanging(tmp_path: Path, sandbox_image: str, where: str) -> None:
    task = _task(tmp_path)
    if (task / where).exists():
        (task / where).unlink()
    os.mkfifo(task / where)
    line = _refused(task, "instruction.md is not a regular file" if where == "instruction.md" else "is a FIFO")
    assert where.split("/")[0] in line


def test_a_device_is_refused(tmp_path: Path, sandbox_image: str) -> None:
    task = _task(tmp_path)
    try:
        os.mknod(task / "environment" / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a character device
    except PermissionError:
        pytest.fail("this test makes a device node: it needs root (as the suite runs here)")
    _refused(task, "'null' is a device")


def test_oversized_files_are_refused(tmp_path: Path, sandbox_image: str) -> None:
    task = _task(tmp_path, "big-instruction")
    (task / "instruction.md").write_bytes(b"x" * (1024 * 1024 + 1))
    _refused(task, "instruction.md is larger than 1,048,576 bytes")
    task = _task(tmp_path, "big-context")
    with open(task / "environment" / "weights.bin", "wb") as sparse:  # 1 GiB on paper, nothing on disk
        sparse.truncate(1024**3)
    _refused(task / "..", "environment/ holds more than 536,870,912 bytes")
    shutil.rmtree(task)
    task = _task(tmp_path, "big-tests")
    (task / "tests" / "blob").write_bytes(b"t" * (4 * 1024 * 1024 + 1))
    _refused(task, "tests/ holds more than 4,194,304 bytes")


# -- ${VAR}: the orchestrator's environment stays the orchestrator's -----------------------------------

COMPOSES = {
    "environment": "services:\n  main:\n    build: .\n    environment:\n      LEAK: ${TOOLFLEET_SECRET}\n",
    "build-arg": "services:\n  main:\n    build:\n      context: .\n      args:\n        LEAK: ${TOOLFLEET_SECRET}\n",
    "valueless": "services:\n  main:\n    build: .\n    environment:\n      - TOOLFLEET_SECRET\n",
    "embedded": "services:\n  main:\n    build: .\n    command: [\"sh\", \"-c\", \"echo x$TOOLFLEET_SECRET\"]\n",
}


@pytest.mark.parametrize("form", sorted(COMPOSES))
def test_toolfleet_secret_in_a_compose_file_is_refused(tmp_path: Path, sandbox_image: str, form: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLFLEET_SECRET", SECRET)
    task = _task(tmp_path)
    (task / "environment" / "docker-compose.yaml").write_text(COMPOSES[form])
    # Not even an operator's '*' passes it: TOOLFLEET_* and credential-looking names never reach a task.
    for task_env in ((), ("*",)):
        _refused(task, "refers to ${TOOLFLEET_SECRET}: toolfleet never passes its own TOOLFLEET_* variables",
                 task_env=task_env)


@pytest.mark.slow  # the CLI in a child process, one image build, one sandbox
def test_compose_secret_reaches_neither_sandbox_nor_log_nor_image(tmp_path: Path, sandbox_image: str) -> None:
    """End to end: the eval refuses the task in one line, writes no log, builds no image; an honest variable
    passed with --task-env reaches the build and the sandbox (the control)."""
    task = _task(tmp_path, "compose-secret")
    compose = ("services:\n  main:\n    build:\n      context: .\n      args:\n        LEAK: ${TOOLFLEET_SECRET}\n"
               "        GREETING: ${TB_GREETING}\n    environment:\n      GREETING: ${TB_GREETING}\n")
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    (task / "environment" / "Dockerfile").write_text(
        "FROM toolfleet/sandbox:latest\nARG LEAK\nARG GREETING\nUSER root\n"
        "RUN echo \"$GREETING\" > /etc/greeting\nUSER sandbox\n")
    (task / "tests" / "test.sh").write_text(
        '[ "$(cat /etc/greeting)" = "$GREETING" ] && [ -n "$GREETING" ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    env = {**os.environ, "TOOLFLEET_SECRET": SECRET, "TB_GREETING": "hi-there"}
    command = [sys.executable, "-m", "orchestrator.cli", "eval", f"harbor:{task}", "--oracle", "--display", "none",
               "--log-dir", str(tmp_path / "logs"), "--task-env", "TB_GREETING"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 1 and SECRET not in done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        (f"toolfleet: error: Harbor task 'compose-secret' ({task}): environment/docker-compose.yaml: services.main "
         "refers to ${TOOLFLEET_SECRET}: toolfleet never passes its own TOOLFLEET_* variables to a task")]
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
    # The control: without the secret's reference the same task builds, and the passed variable arrives.
    honest = compose.replace("        LEAK: ${TOOLFLEET_SECRET}\n", "")
    (task / "environment" / "docker-compose.yaml").write_text(honest)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "oracle passed on 1 task" in done.stdout  # test.sh saw GREETING in its environment and in the image
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*") if p.is_file())
    assert logs and SECRET not in logs
    images = subprocess.run(["docker", "images", "--filter", "label=toolfleet.harbor.task=compose-secret", "-q"],
                            capture_output=True, text=True, timeout=60).stdout.split()
    assert images
    for image in set(images):
        history = subprocess.run(["docker", "history", "--no-trunc", image], capture_output=True, text=True,
                                 timeout=60).stdout
        assert SECRET not in history and "GREETING=hi-there" in history
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)


def test_what_travels_is_exactly_what_was_walked(tmp_path: Path) -> None:
    """The build context's tar and the archive copied into a sandbox hold the walked files, links as links
    (their targets as written, never read on the host), executable bits, and nothing else."""
    import base64
    import gzip
    import io
    import tarfile

    from orchestrator.dataset._harbor_tree import pack_tree, tree_tar, walk_tree

    task = _task(tmp_path)
    (task / "environment" / "bin").mkdir()
    (task / "environment" / "bin" / "run").write_text("#!/bin/sh\necho hi\n")
    (task / "environment" / "bin" / "run").chmod(0o755)
    (task / "environment" / "latest").symlink_to("bin/run")
    entries = walk_tree(task, "environment", 1 << 20, 100)
    assert [(e.rel, e.kind) for e in entries] == [("Dockerfile", "file"), ("bin", "dir"), ("bin/run", "file"),
                                                 ("latest", "link")]
    with tarfile.open(fileobj=tree_tar(task, "environment", entries)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["Dockerfile", "bin", "bin/run", "latest"]
        assert members["latest"].issym() and members["latest"].linkname == "bin/run"
        assert members["bin/run"].mode == 0o755 and tar.extractfile("bin/run").read() == b"#!/bin/sh\necho hi\n"
    packed = gzip.decompress(base64.b64decode(pack_tree(task, "environment", 1 << 20)))
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        assert sorted(m.name for m in tar.getmembers()) == ["Dockerfile", "bin/run", "latest"]
    with pytest.raises(TaskTreeError, match="environment holds more than 10 bytes"):
        pack_tree(task, "environment", 10)
