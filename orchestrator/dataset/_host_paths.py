"""What of the orchestrator's host a sample's ``files`` may read (an untrusted dataset is the attacker).

Benchmarks ship repositories and datasets from third parties, and everything a sample's files read
lands in the model's sandbox and the eval log. So:

* **Symlinks inside a directory source are copied as links**, never followed: a link to
  ``/proc/self/environ`` or ``~/.ssh/id_rsa`` arrives as a link, which inside the sandbox points at
  the sandbox's own file (or nothing). The source itself, when it is a link, is resolved once by the
  rule below.
* **Only regular files and directories are read.** FIFOs, sockets and devices are refused, and so is
  anything under ``/proc``, ``/sys`` or ``/dev`` (files there report sizes that are not their
  contents: ``/proc/kallsyms`` is "0 bytes" and 5 MB of kernel addresses).
* **Sizes are counted on the bytes read**, never on ``st_size``: a file is read with at most the bytes
  left under the limit, plus one to see that it was over.
* **A string may name a host file only inside the task's directory** (the task file's directory, or
  the current directory without one), or a directory listed in ``TOOLFLEET_SAMPLE_FILES_ROOTS``
  (``os.pathsep``-separated): a dataset row is data, and ``"/home/me/.aws/credentials"`` in one is
  refused, not copied. A ``pathlib.Path`` can only come from the task's own code (trusted), so it may
  name any regular file or directory outside the special trees above.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOTS_ENV", "Link", "allowed_roots", "named_path_refusal", "read_bounded", "special_refusal", "walk"]

ROOTS_ENV = "TOOLFLEET_SAMPLE_FILES_ROOTS"
SPECIAL_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


@dataclass(frozen=True)
class Link:
    """A symlink inside a directory source, sent as a link to ``target`` (never followed on the host)."""

    target: str


def allowed_roots(base: Path) -> list[Path]:
    extra = [Path(p).expanduser().resolve() for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return [base.resolve(), *extra]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def special_refusal(path: Path) -> str | None:
    """Why a resolved host path is never read (None: it may be)."""
    if any(_inside(path, tree) for tree in SPECIAL_TREES):
        return f"'{path}' is under {'/'.join(('', path.parts[1]))} (never read: its sizes are not its contents)"
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # missing: the caller's own message
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"'{path}' is not a regular file or directory"
    return None


def named_path_refusal(path: Path, base: Path) -> str | None:
    """Why a *string* naming ``path`` (resolved) may not read it: outside the allowed roots, or special."""
    if not any(_inside(path, root) for root in allowed_roots(base)):
        return (f"'{path}' is outside the task's directory ({base}); a dataset's strings may name files only "
                f"there (use a pathlib.Path in the task's code, or list the directory in {ROOTS_ENV})")
    return special_refusal(path)


def walk(root: Path) -> Iterator[tuple[str, Path | Link]]:
    """(relative POSIX path, file or link) under a directory, in a stable order, never following a link.

    ``ValueError`` naming the first FIFO, socket or device found."""
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False: linked directories are not entered
        dirnames.sort()
        entries = sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))])
        for name in entries:
            file = Path(dirpath) / name
            mode = file.lstat().st_mode
            rel = file.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                yield rel, Link(os.readlink(file))
            elif stat.S_ISREG(mode):
                yield rel, file
            elif not stat.S_ISDIR(mode):
                raise ValueError(f"'{file}' is not a regular file, directory or symlink")


def read_bounded(path: Path, budget: int) -> tuple[bytes, bool]:
    """(at most ``budget + 1`` bytes of a regular file, whether it is executable).

    Opened without following a final symlink and without blocking, and checked to be a regular file
    on the open descriptor, so a file swapped for a FIFO or a link after the walk is refused, not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"'{path}' is not a regular file")
        chunks: list[bytes] = []
        left = budget + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), bool(info.st_mode & 0o111) and os.access(path, os.X_OK)
    finally:
        os.close(fd)
