"""Code, tests and docs point into the repository, never to documents a reader of it does not have
(a product spec's sections, a tracker's issue numbers, design notes kept elsewhere): the reason is
written where it is needed, or in ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("orchestrator", "workers", "tests", "docs")
SCANNED_FILES = ("README.md", "SECURITY.md", "CONTRIBUTING.md")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".json"}

OUTSIDE = re.compile(r"SPEC §|SPEC\.md|\b[Ii]ssue #?\d+|\b[Ss]eed 00\d|/work/shared/")


def outside_references(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` for each line citing a document outside the repository."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


@pytest.mark.parametrize(
    ("line", "cites"),
    [
        ("a restart is survived by design (SPEC §8).", True),
        ("see /work/shared/SPEC.md", True),
        ("Since issue 18 that machinery runs once per stage", True),
        ("A task's own tools on the fleet (issue #18)", True),
        ("the race of issue 10.3", True),
        ("Issue 14, item 14: the names", True),
        ("not charged to the sample (seed 002).", True),
        ('"""Seed 002 sentences about agents', True),
        ("the issues a reviewer raises", False),
        ("tissue 3 of the sample", False),
        ("seed=7 gives the same shuffle", False),
        ("the spec's own fields (docs/log-format.md)", False),
    ],
)
def test_outside_reference_table(line: str, cites: bool) -> None:
    assert bool(outside_references(line)) is cites


def _scanned() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES]
    for directory in SCANNED_DIRS:
        files.extend(p for p in (ROOT / directory).rglob("*")
                     if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)
    return sorted(p for p in files if p.resolve() != Path(__file__).resolve())


def test_scanned_files_include_code_tests_and_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _scanned()}
    assert {"README.md", "SECURITY.md", "CONTRIBUTING.md", "docs/scaling.md", "orchestrator/_wire.py",
            "workers/tasks.py", "tests/conftest.py"} <= names


def test_no_citation_of_documents_outside_the_repository() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line}"
             for path in _scanned() for number, line in outside_references(path.read_text(errors="replace"))]
    assert not found, "cite the reason or a page of docs/ instead:\n" + "\n".join(found)
