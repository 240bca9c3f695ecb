"""``Sample.files`` forms (inline text, bytes, data URI, local file, local directory, ``Path``), the size
limit (checked when the task loads, naming the sample and the path), and one archive per sample.

The sandbox reads back what arrived: a scorer compares every file's bytes (and the executable bit of a
local script) with what the sample gave, in a local sandbox, a Docker sandbox, and through a worker.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample, SampleFilesError, pack_sample_files, resolve_sample_files
from orchestrator.eval import Task, TaskError, eval_async, load_task
from orchestrator.scorer import CORRECT, INCORRECT, Score, Target, scorer
from orchestrator.util import sandbox

pytestmark = pytest.mark.timeout(180)

BINARY = bytes(range(256)) * 4


@pytest.fixture(autouse=True)
def _tmp_is_a_files_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tasks are built in code, not loaded from a file, and name files under tmp_path by string:
    strings name host files only inside the task's directory or a listed root (tests/security/test_dataset_files.py)."""
    monkeypatch.setenv("TOOLFLEET_SAMPLE_FILES_ROOTS", str(tmp_path))


def _local_tree(root: Path) -> Path:
    """A small repository on the host: nested directories, a binary file, an executable script."""
    repo = root / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "sub" / "mod.py").write_text("VALUE = 'é'\n")
    (repo / "blob.bin").write_bytes(BINARY)
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    (root / "single.txt").write_text("from a file\n")
    return repo


def _expected(repo: Path, absolute_dir: str) -> dict[str, bytes]:
    return {
        "inline.txt": b"inline text\n",
        "raw.bin": BINARY,
        "data.txt": b"hi there",
        "single.txt": b"from a file\n",
        "tree/pkg/__init__.py": b"",
        "tree/pkg/sub/mod.py": "VALUE = 'é'\n".encode(),
        "tree/blob.bin": BINARY,
        "tree/run.sh": b"#!/bin/sh\necho ran\n",
        f"{absolute_dir}/abs.txt": b"absolute",
        "empty.txt": b"",
    }


def _files(root: Path, absolute_dir: str) -> dict[str, Any]:
    return {
        "inline.txt": "inline text\n",
        "raw.bin": BINARY,
        "data.txt": "data:text/plain;base64," + base64.b64encode(b"hi there").decode(),
        "single.txt": str(root / "single.txt"),
        "tree": root / "repo",  # a Path: a directory, copied recursively under the key
        f"{absolute_dir}/abs.txt": "absolute",
        "empty.txt": "",
    }


@scorer(metrics=[])
def files_arrived() -> Any:
    async def score(state: Any, target: Target) -> Score:
        box = sandbox()
        expected: dict[str, str] = state.metadata["sha256"]
        wrong = []
        for path, digest in expected.items():
            got = hashlib.sha256(await box.read_file(path, text=False)).hexdigest()
            if got != digest:
                wrong.append(path)
        # (sh run.sh, not ./run.sh: a Docker sandbox's working directory may be a noexec tmpfs)
        mode_and_run = '[ "$(stat -c %a tree/run.sh)" = 755 ] && sh tree/run.sh && cat setup-saw.txt'
        ran = await box.exec(["sh", "-c", mode_and_run])
        leftovers = await box.exec(["sh", "-c", "ls /tmp | grep -c toolfleet-files || true"])
        ok = not wrong and ran.stdout == "ran\ninline text\n" and leftovers.stdout.strip() == "0"
        return Score(value=CORRECT if ok else INCORRECT,
                     explanation=f"wrong={wrong} ran={ran.stdout!r}{ran.stderr!r} left={leftovers.stdout!r}")

    return score


def _task(root: Path, sandbox_config: Any, absolute_dir: str) -> Task:
    _local_tree(root)
    expected = _expected(root / "repo", absolute_dir)
    sample = Sample(input="x", id="forms", files=_files(root, absolute_dir),
                    setup="cat inline.txt > setup-saw.txt",
                    metadata={"sha256": {k: hashlib.sha256(v).hexdigest() for k, v in expected.items()}})
    return Task(dataset=[sample], scorer=files_arrived(), sandbox=sandbox_config)


def _check(log: Any) -> None:
    assert log.status == "success", [s.error for s in log.samples]
    [sample] = log.samples
    score = sample.scores["files_arrived"]
    assert score.value == CORRECT, score.explanation


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_every_form_arrives_in_a_local_sandbox(tmp_path: Path) -> None:
    absolute = tmp_path / "elsewhere"
    [log] = await eval_async(_task(tmp_path / "src", "local", str(absolute)), "scripted", log_dir=tmp_path / "logs")
    _check(log)


@pytest.mark.docker
async def test_every_form_arrives_in_a_docker_sandbox(tmp_path: Path, sandbox_image: str) -> None:
    config = {"type": "docker", "image": sandbox_image, "pool_size": 0}
    [log] = await eval_async(_task(tmp_path, config, "/tmp/abs"), "scripted", log_dir=tmp_path / "logs")
    _check(log)


@pytest.mark.celery
async def test_every_form_arrives_through_a_worker(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker()
    absolute = tmp_path / "elsewhere"
    [log] = await eval_async(_task(tmp_path / "src", "local", str(absolute)), "scripted", log_dir=tmp_path / "logs",
                             broker=fleet.redis.url)
    _check(log)


def test_one_archive_per_sample_however_many_files(tmp_path: Path) -> None:
    for i in range(300):
        (tmp_path / f"f{i}.txt").write_text(str(i))
    sample = Sample(input="x", id=1, files={"many": tmp_path, "one.txt": "x"})
    wire, setup = pack_sample_files(1, resolve_sample_files(sample), "echo user-setup")
    assert len(wire) == 1 and setup is not None
    assert setup.rstrip().endswith("exec sh -c 'echo user-setup'")
    wire, setup = pack_sample_files(1, {"a.txt": "x", "/abs/b.txt": b"y"}, None)
    assert len(wire) == 2 and setup is not None and "exec" not in setup  # relative + absolute; no user setup
    assert pack_sample_files(1, None, "echo only") == ({}, "echo only")  # no files: setup as given


def test_relative_paths_resolve_against_the_task_file(tmp_path: Path) -> None:
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "a.txt").write_text("A")
    task_file = tmp_path / "files_task.py"
    task_file.write_text(textwrap.dedent("""
        from orchestrator.dataset import Sample
        from orchestrator.eval import Task, task

        @task
        def files_task():
            return Task(dataset=[Sample(input="x", id="s1", files={"a.txt": "fixtures/a.txt",
                                                                   "b.txt": "fixtures/missing.txt"})])
    """))
    t = load_task(str(task_file))
    files = t.dataset[0].files
    assert files is not None
    assert files["a.txt"] == (tmp_path / "fixtures" / "a.txt").resolve()
    assert files["b.txt"] == "fixtures/missing.txt"  # no such file: Inspect's rule, it is the contents


def test_size_limit_fails_the_task_load_naming_sample_and_path(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "big.bin").write_bytes(b"\0" * 3000)
    task_file = tmp_path / "big_task.py"
    task_file.write_text(textwrap.dedent("""
        from orchestrator.dataset import Sample
        from orchestrator.eval import Task, task

        @task
        def big_task():
            return Task(dataset=[Sample(input="x", id="small", files={"a.txt": "tiny"}),
                                 Sample(input="x", id="huge", files={"a.txt": "tiny", "data/big.bin": "big.bin"})])
    """))
    monkeypatch.setenv("TOOLFLEET_SAMPLE_FILES_LIMIT", "2048")
    with pytest.raises(TaskError) as info:
        load_task(str(task_file))
    message = str(info.value)
    assert "Sample 'huge'" in message and "'data/big.bin'" in message and str(tmp_path / "big.bin") in message
    assert "2,048 bytes" in message and "\n" not in message
    monkeypatch.setenv("TOOLFLEET_SAMPLE_FILES_LIMIT", "4096")
    assert load_task(str(task_file)).dataset[1].files is not None


def test_size_limit_counts_directories_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for i in range(4):
        (tmp_path / "d" / f"{i}.bin").write_bytes(b"x" * 400)
    sample = Sample(input="x", id=7, files={"dir": tmp_path / "d", "raw": b"y" * 300})
    assert resolve_sample_files(sample, limit=1900) is not None
    with pytest.raises(SampleFilesError, match=r"Sample 7: files exceed the limit of 1,800 bytes at 'raw'"):
        resolve_sample_files(sample, limit=1800)


@pytest.mark.parametrize(("files", "message"), [
    ({"a": Path("/nonexistent/toolfleet/x")}, "local path '/nonexistent/toolfleet/x' does not exist"),
    ({"a": "https://example.com/x.txt"}, "URLs are not downloaded"),
    ({"a": "data:;base64,@@@"}, "invalid data URI"),
    ({"../escape.txt": "x"}, "'..' is not allowed"),
    ({"": "x"}, "a files key must be a non-empty path"),
])
def test_bad_files_are_one_clear_error(files: dict[str, Any], message: str) -> None:
    with pytest.raises(SampleFilesError, match="Sample 's9'") as info:
        resolve_sample_files(Sample(input="x", id="s9", files=files))
    assert message in str(info.value)


@pytest.mark.docker
async def test_unwritable_destination_fails_the_setup_clearly(tmp_path: Path, sandbox_image: str) -> None:
    sample = Sample(input="x", id="ro", files={"/etc/toolfleet-test.txt": "x"}, setup="echo never")
    task = Task(dataset=[sample], sandbox={"type": "docker", "image": sandbox_image, "pool_size": 0})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    [result] = log.samples
    assert result.error is not None
    assert "could not unpack the sample's files into /" in result.error.message
    assert "exited with 70" in result.error.message
