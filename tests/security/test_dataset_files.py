"""An untrusted dataset's ``Sample.files`` reaching the orchestrator host.

Before: a directory source holding a symlink to a 0600 file or to ``/proc/self/environ`` copied it into
the model's sandbox (``TOOLFLEET_SECRET`` and API keys then also sat in the eval log); ``/proc/kallsyms``
("0 bytes") passed the 4 MiB limit with 5 MB; a dataset's string could name any host file. Now: links are
copied as links (resolved inside the sandbox, never on the host), FIFOs, devices, sockets and /proc, /sys,
/dev are refused in one line, sizes count the bytes read, and a string names files only inside the task's
directory. Real evals, real Docker for the sandbox's view.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample, SampleFilesError, pack_sample_files, resolve_sample_files
from orchestrator.eval import Task, TaskError, eval_async, load_task
from orchestrator.scorer import CORRECT, INCORRECT, Score, Target, scorer
from orchestrator.util import sandbox

pytestmark = pytest.mark.timeout(180)

SECRET = "toolfleet-test-secret-" + hashlib.sha256(b"dataset").hexdigest()[:16]


def _hostile_repo(root: Path) -> Path:
    """A third party's repository: one honest file, links to a private file and to the process environment."""
    private = root / "private"
    private.mkdir()
    key = private / "id_rsa"
    key.write_text(SECRET)
    key.chmod(0o600)
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "ok.py").write_text("print('ok')\n")
    (repo / "environ").symlink_to("/proc/self/environ")
    (repo / "key").symlink_to(key)
    (repo / "keys").symlink_to(private, target_is_directory=True)
    (repo / "src" / "sibling").symlink_to("ok.py")  # an honest relative link keeps working
    return repo


@scorer(metrics=[])
def what_the_sandbox_got() -> Any:
    async def score(state: Any, target: Target) -> Score:
        probe = await sandbox().exec(["sh", "-c", ("for f in environ key keys; do readlink repo/$f; done; "
                                             "cat repo/key repo/keys/id_rsa 2>/dev/null; cat repo/src/sibling")])
        return Score(value=CORRECT if SECRET not in probe.stdout else INCORRECT, explanation=probe.stdout)

    return score


@pytest.mark.docker
async def test_links_out_of_a_directory_source_arrive_as_links(tmp_path: Path, sandbox_image: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLFLEET_SAMPLE_FILES_ROOTS", str(tmp_path))
    monkeypatch.setenv("TOOLFLEET_TEST_DATASET_SECRET", SECRET)  # in this process's /proc/self/environ
    sample = Sample(input="x", id="hostile", files={"repo": _hostile_repo(tmp_path)})
    task = Task(dataset=[sample], scorer=what_the_sandbox_got(),
                sandbox={"type": "docker", "image": sandbox_image, "pool_size": 0})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path / "logs")
    assert log.status == "success", [s.error for s in log.samples]
    score = log.samples[0].scores["what_the_sandbox_got"]
    assert score.value == CORRECT, score.explanation
    assert score.explanation.splitlines()[:3] == ["/proc/self/environ", str(tmp_path / "private" / "id_rsa"),
                                                  str(tmp_path / "private")]
    assert score.explanation.endswith("print('ok')\n")
    for written in (tmp_path / "logs").rglob("*"):
        if written.is_file():
            assert SECRET.encode() not in written.read_bytes(), written


@pytest.mark.parametrize(("source", "message"), [
    (Path("/proc/self/environ"), "is under /proc"),
    (Path("/proc/kallsyms"), "is under /proc"),
    (Path("/sys/kernel"), "is under /sys"),
    (Path("/dev/zero"), "is under /dev"),
], ids=["environ", "kallsyms", "sys", "dev-zero"])
def test_special_trees_are_refused_in_one_line(source: Path, message: str) -> None:
    with pytest.raises(SampleFilesError) as info:
        pack_sample_files("s", resolve_sample_files(Sample(input="x", id="s", files={"f": source})), None)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_fifo_in_a_directory_is_refused_not_read(tmp_path: Path) -> None:
    """A FIFO nobody writes would block the read forever; a device would read without end."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a")
    os.mkfifo(tmp_path / "d" / "pipe")
    with pytest.raises(SampleFilesError, match="is not a regular file, directory or symlink"):
        pack_sample_files("s", {"d": tmp_path / "d"}, None)


def test_size_counts_the_bytes_read(tmp_path: Path) -> None:
    """A file that grows after the task loaded (or lies in st_size) is cut off at the limit, not sent."""
    grows = tmp_path / "grows.log"
    grows.write_bytes(b"x" * 10)
    sample = Sample(input="x", id="g", files={"g.log": grows})
    files = resolve_sample_files(sample, limit=4096)  # load time: 10 bytes
    with grows.open("ab") as f:
        f.write(b"y" * 10_000_000)
    with pytest.raises(SampleFilesError, match=r"at least 4,097 bytes read"):
        pack_sample_files("g", files, None, limit=4096)


def test_a_dataset_string_cannot_name_host_files_outside_the_task_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials").write_text(SECRET)
    task_dir = tmp_path / "task"
    (task_dir / "fixtures").mkdir(parents=True)
    (task_dir / "fixtures" / "ok.txt").write_text("fine")
    (task_dir / "fixtures" / "escape").symlink_to(outside / "credentials")
    rows = [{"input": "x", "id": "ok", "files": {"a.txt": "fixtures/ok.txt"}}]
    for i, name in enumerate([str(outside / "credentials"), "../outside/credentials", "fixtures/escape",
                              "/etc/passwd"]):
        rows.append({"input": "x", "id": f"evil{i}", "files": {"a.txt": name}})
    for row in rows:
        dataset = task_dir / "data.jsonl"
        dataset.write_text(json.dumps(row) + "\n")
        (task_dir / "files_task.py").write_text(textwrap.dedent("""
            import json
            from pathlib import Path
            from orchestrator.dataset import Sample
            from orchestrator.eval import Task, task

            @task
            def files_task():
                rows = [json.loads(l) for l in (Path(__file__).parent / "data.jsonl").read_text().splitlines()]
                return Task(dataset=[Sample(**r) for r in rows])
        """))
        if row["id"] == "ok":
            loaded = load_task(str(task_dir / "files_task.py"))
            assert loaded.dataset[0].files == {"a.txt": (task_dir / "fixtures" / "ok.txt").resolve()}
            continue
        with pytest.raises(TaskError) as info:
            load_task(str(task_dir / "files_task.py"))
        assert "outside the task's directory" in str(info.value) and "\n" not in str(info.value), row
