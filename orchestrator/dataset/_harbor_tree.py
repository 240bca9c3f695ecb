"""A Harbor task directory read as data: nothing of it is followed outside it, nothing hangs, sizes bounded.

A task directory is a third party's data (a downloaded benchmark), yet the orchestrator's host reads it:
``instruction.md`` becomes the model's prompt, ``environment/`` a build context, ``tests/`` and
``solution/`` travel into the sandbox. So, for everything under a task directory:

* **The files the host reads** (``task.toml``, ``instruction.md``, the Dockerfiles, the compose file) and
  **the directories it walks** (``environment/``, build contexts, ``tests/``, ``solution/``) are opened one
  path component at a time with ``O_NOFOLLOW`` from the task directory: a symlink anywhere on the way is
  refused, never followed. Files are opened non-blocking and checked to be regular on the open
  descriptor, so a FIFO is never waited on, and read with at most their limit plus one byte.
* **Inside a walked directory** only regular files, directories and symlinks are accepted (a FIFO, a
  socket or a device is refused, by name, without opening it). A symlink is never followed on the host:
  it travels as a link (into the sandbox, or in a build context) and is refused if it points outside the
  task directory (an absolute target, or one whose ``..`` climbs out).
* **Sizes are bounded** (``TreeLimits``): the instruction, each read file, each walked tree (bytes and
  entries). Whatever breaks a rule is one ``TaskTreeError`` line naming the path inside the task.

``walk_tree`` is the validated walk a build context is hashed and sent from (``tree_tar`` packs one);
``read_task_file`` the bounded read of one file.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator._errors import ToolfleetError

__all__ = ["TaskTreeError", "TreeEntry", "TreeLimits", "open_task_dir", "pack_tree", "read_task_file",
           "stream_task_file", "tree_tar", "walk_tree"]

_MIB = 1024 * 1024


class TaskTreeError(ToolfleetError, ValueError):
    """Something in a task directory the host will not read or follow (one line, naming the path)."""


class TreeLimits(BaseModel):
    """Bounds on what the host reads of one task directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction_bytes: int = Field(1 * _MIB, gt=0, description="instruction.md")
    file_bytes: int = Field(1 * _MIB, gt=0, description="task.toml, a Dockerfile, the compose file")
    context_bytes: int = Field(512 * _MIB, gt=0, description="a build context's files, in total")
    tree_entries: int = Field(50_000, gt=0, description="files, directories and links in one walked tree")


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a walked tree: ``kind`` is ``file``, ``dir`` or ``link``."""

    rel: str  # POSIX path relative to the tree's root
    kind: str
    size: int = 0  # a file's size when walked (its read is bounded by it again)
    executable: bool = False
    target: str = ""  # a link's target, as written


def _flags(directory: bool) -> int:
    extra = os.O_DIRECTORY if directory else os.O_NONBLOCK
    return os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | extra


def open_task_dir(task_dir: Path, rel: str, what: str | None = None) -> int:
    """A descriptor of directory ``rel`` under ``task_dir``, reached without following any symlink
    (``task_dir`` itself is the operator's path, resolved once). The caller closes it."""
    return _open(task_dir, rel, directory=True, what=what or rel)


def _open(task_dir: Path, rel: str, *, directory: bool, what: str) -> int:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise TaskTreeError(f"{what}: '..' leaves the task directory")
    fd = os.open(task_dir, _flags(True))
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                # Looked at before it is opened: a link is named as such, and a device or FIFO is never opened
                # (O_NOFOLLOW and the descriptor's own check below still close the race with a swap).
                kind = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISLNK(kind):
                    raise OSError(errno.ELOOP, "a symlink")
                if last and not directory and not stat.S_ISREG(kind):
                    raise TaskTreeError(f"{what} is not a regular file (only regular files and directories "
                                        "are read)")
                nxt = os.open(part, _flags(directory or not last), dir_fd=fd)
            except OSError as exc:
                raise _open_error(exc, "/".join(parts[: index + 1]), what, directory or not last) from None
            os.close(fd)
            fd = nxt
        mode = os.fstat(fd).st_mode
        if directory and not stat.S_ISDIR(mode):
            raise TaskTreeError(f"{what} is not a directory")
        if not directory and not stat.S_ISREG(mode):
            raise TaskTreeError(f"{what} is not a regular file (only regular files and directories are read)")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_error(exc: OSError, path: str, what: str, directory: bool) -> Exception:
    subject = what if path == what.rstrip("/") else f"{what}: '{path}'"
    if exc.errno == errno.ELOOP:
        return TaskTreeError(f"{subject} is a symlink (a task's files are read only inside its directory, never "
                             "through a link)")
    if exc.errno == errno.ENOTDIR and directory:
        return TaskTreeError(f"{subject} is not a directory")
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(f"{what} is missing")
    if exc.errno == errno.ENXIO:  # a FIFO with no writer, opened non-blocking for writing; never for reading
        return TaskTreeError(f"{what} is not a regular file")
    return TaskTreeError(f"{what} cannot be read ({exc.strerror or exc})")


def stream_task_file(task_dir: Path, rel: str, limit: int, what: str | None = None) -> Iterator[bytes]:
    """The bytes of regular file ``rel`` under ``task_dir``, in chunks (see the module doc);
    ``FileNotFoundError`` when it is missing, ``TaskTreeError`` when it may not be read or is larger than
    ``limit`` (raised once the limit is passed: a caller keeps nothing of a refused file)."""
    what = what or rel
    fd = _open(task_dir, rel, directory=False, what=what)
    try:
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, _MIB))
            if not chunk:
                return
            left -= len(chunk)
            if left <= 0:
                raise TaskTreeError(f"{what} is larger than {limit:,} bytes")
            yield chunk
    finally:
        os.close(fd)


def read_task_file(task_dir: Path, rel: str, limit: int, what: str | None = None) -> bytes:
    """The bytes of regular file ``rel`` under ``task_dir`` (``stream_task_file``, joined)."""
    return b"".join(stream_task_file(task_dir, rel, limit, what))


def exists(task_dir: Path, rel: str) -> bool:
    """Whether ``rel`` exists under ``task_dir`` (as anything; a link is not followed)."""
    return os.path.lexists(task_dir / rel)


def walk_tree(task_dir: Path, rel: str, max_bytes: int, max_entries: int, what: str | None = None) -> list[TreeEntry]:
    """Every entry under directory ``rel`` of ``task_dir`` (sorted, links not followed), validated as the
    module doc says; ``max_bytes`` bounds the files' total size and ``max_entries`` their count."""
    what = what or rel
    fd = open_task_dir(task_dir, rel, what)
    entries: list[TreeEntry] = []
    total = 0
    try:
        for entry in _walk(fd, "", what, rel):
            entries.append(entry)
            total += entry.size
            if len(entries) > max_entries:
                raise TaskTreeError(f"{what} holds more than {max_entries:,} entries")
            if total > max_bytes:
                raise TaskTreeError(f"{what} holds more than {max_bytes:,} bytes")
    finally:
        os.close(fd)
    return entries


def _walk(fd: int, prefix: str, what: str, root_rel: str) -> Iterator[TreeEntry]:
    for name in sorted(os.listdir(fd)):
        rel = f"{prefix}{name}"
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            target = os.readlink(name, dir_fd=fd)
            _check_link(root_rel, rel, target, what)
            yield TreeEntry(rel, "link", target=target)
        elif stat.S_ISREG(mode):
            yield TreeEntry(rel, "file", info.st_size, bool(mode & 0o111))
        elif stat.S_ISDIR(mode):
            yield TreeEntry(rel, "dir")
            try:
                child = os.open(name, _flags(True), dir_fd=fd)
            except OSError as exc:
                raise _open_error(exc, f"{root_rel}/{rel}", what, True) from None
            try:
                yield from _walk(child, rel + "/", what, root_rel)
            finally:
                os.close(child)
        else:
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise TaskTreeError(f"{what}: '{rel}' is {kind} (only regular files, directories and links are read)")


def _check_link(root_rel: str, rel: str, target: str, what: str) -> None:
    """A link must point inside the task directory (judged on the text: nothing is resolved on the host)."""
    if not target or target.startswith("/"):
        raise TaskTreeError(f"{what}: link '{rel}' points outside the task directory ({target[:200]!r})")
    where = posixpath.dirname(posixpath.join(root_rel, rel))
    resolved = posixpath.normpath(posixpath.join(where, target))
    if resolved == ".." or resolved.startswith("../"):
        raise TaskTreeError(f"{what}: link '{rel}' points outside the task directory ({target[:200]!r})")


def read_entry(task_dir: Path, rel: str, entry: TreeEntry, what: str) -> bytes:
    """A walked file's bytes, read again without following links and bounded by its walked size."""
    return read_task_file(task_dir, f"{rel}/{entry.rel}", entry.size, f"{what}/{entry.rel}")


class _Chunks(io.RawIOBase):
    """A file object over ``stream_task_file`` (what ``tarfile.addfile`` reads a member from)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n


def tree_tar(task_dir: Path, rel: str, entries: list[TreeEntry], what: str | None = None) -> IO[bytes]:
    """An uncompressed tar of a walked tree (links as links, modes kept, owner root), e.g. a build
    context for ``docker build`` (``custom_context``): exactly what was validated, nothing else. Spooled
    to a temporary file past 16 MiB; the caller closes it."""
    what = what or rel
    buffer: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=16 * _MIB)  # noqa: SIM115 - returned open
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.rel)
            info.uid = info.gid = 0
            if entry.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif entry.kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = entry.size, 0o755 if entry.executable else 0o644
                chunks = stream_task_file(task_dir, f"{rel}/{entry.rel}", entry.size, f"{what}/{entry.rel}")
                tar.addfile(info, io.BufferedReader(_Chunks(chunks)))
    buffer.seek(0)
    return buffer


def pack_tree(task_dir: Path, rel: str, limit: int, what: str | None = None) -> str:
    """Directory ``rel`` of a task as one base64 gzipped tar (links as links, executable bits kept), for
    ``base64 -d | tar -xz`` in a sandbox; at most ``limit`` bytes of files (``TaskTreeError`` beyond)."""
    import base64

    from ._files import _archive
    from ._host_paths import Link

    what = what or rel
    entries = walk_tree(task_dir, rel, limit, 50_000, what)
    members: list[tuple[str, bytes | Link, bool]] = []
    for entry in entries:
        if entry.kind == "link":
            members.append((entry.rel, Link(entry.target), False))
        elif entry.kind == "file":
            members.append((entry.rel, read_entry(task_dir, rel, entry, what), entry.executable))
    return base64.b64encode(_archive(members)).decode("ascii")
