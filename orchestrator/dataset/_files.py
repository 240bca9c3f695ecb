"""``Sample.files``: what a value may be, how it is checked when the task loads, and how it travels.

A ``Sample.files`` entry maps a path in the sandbox to its contents. The key is absolute, or relative
to the sandbox's working directory (the image's ``WORKDIR``, or ``working_dir`` in the sandbox config);
it may not contain ``..``. The value is (Inspect's forms, plus ``bytes`` and ``Path``):

* ``bytes``: the contents as they are;
* a ``pathlib.Path``: a local file (its contents) or directory (every file under it, recursively, placed
  under the key; empty directories are not copied); it must exist;
* a ``str`` that names an existing local file or directory (absolute, or relative to the task file's
  directory, as Inspect runs a task from its directory; without a task file, the current directory):
  the same as a ``Path``, but only inside that directory (or ``TOOLFLEET_SAMPLE_FILES_ROOTS``): a
  dataset is untrusted (``_host_paths`` says what a sample's files may read of the host);
* a ``data:`` URI (``data:;base64,...`` or percent-encoded text): the decoded bytes;
* any other ``str``: the contents, as UTF-8 text (``""`` is an empty file, never a path).
  ``http(s)://`` URLs are refused (nothing is downloaded: fetch the file first).

``resolve_sample_files`` runs when the task loads (``load_task``): it turns path strings into
absolute ``Path``s, decodes nothing yet, and checks every path exists and is readable and that the
sample's total (``st_size`` here; the bytes read when packing) stays under ``sample_files_limit()``
(``TOOLFLEET_SAMPLE_FILES_LIMIT`` bytes, default 4 MiB: the whole sample spec must fit in one broker message). Each
problem is a ``SampleFilesError`` naming the sample and the path.

``pack_sample_files`` runs when the sample's sandbox opens: the files become ONE gzipped tar archive per
kind of key (relative keys, absolute keys), written into the sandbox as one base64 text file and
unpacked by a few lines of shell put before the sample's ``setup`` script (then run unchanged, by
``exec sh -c``). So a sample with hundreds of files costs one write and one exec, not one per file.
Unpacking needs ``sh``, ``base64`` and ``tar`` (with gzip) in the image (Debian, Ubuntu, Alpine and
``toolfleet/sandbox`` have them). Files are unpacked as the sandbox's default user (so a non-root
user cannot write outside the places it owns); mode 0644, or 0755 for local files that are executable.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import os
import shlex
import tarfile
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator._errors import ToolfleetError

from ._host_paths import Link, named_path_refusal, read_bounded, special_refusal, walk

if TYPE_CHECKING:
    from ._sample import Sample

FileValue = str | bytes | Path
LIMIT_ENV = "TOOLFLEET_SAMPLE_FILES_LIMIT"
DEFAULT_LIMIT_BYTES = 4 * 1024 * 1024
_MAX_PATH_CHARS = 4096  # longer strings (or ones with newlines) are always contents, never checked as paths
UNPACK_FAILED_EXIT = 70


class SampleFilesError(ToolfleetError, ValueError):
    """A sample's ``files`` cannot be sent: a missing or unreadable path, a bad key or data URI, too large."""


def sample_files_limit() -> int:
    """The most bytes (before compression) a sample's files may total."""
    raw = os.environ.get(LIMIT_ENV)
    if not raw:
        return DEFAULT_LIMIT_BYTES
    try:
        return int(raw)
    except ValueError:
        raise SampleFilesError(f"{LIMIT_ENV} must be a number of bytes, got {raw!r}.") from None


def _where(sample_id: object, key: str) -> str:
    return f"Sample {sample_id!r}, file '{key}'"


def _check_key(sample_id: object, key: object) -> None:  # a dataset's keys: anything until checked
    if not isinstance(key, str) or not key.strip() or "\0" in key:
        raise SampleFilesError(f"Sample {sample_id!r}: a files key must be a non-empty path, got {key!r}.")
    if ".." in PurePosixPath(key).parts:
        raise SampleFilesError(f"{_where(sample_id, key)}: '..' is not allowed in a sandbox path.")


def _is_data_uri(value: str) -> bool:
    return value.startswith("data:") and "," in value


def _as_local_path(value: str, base_dir: Path) -> Path | None:
    """The existing local file or directory a string names, or None (then it is contents)."""
    if not value or len(value) > _MAX_PATH_CHARS or "\n" in value or "\0" in value:
        return None
    try:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        return path.resolve() if path.exists() else None
    except (OSError, ValueError):
        return None


def _local_entries(sample_id: object, key: str, path: Path) -> Iterator[tuple[str, Path | Link]]:
    why = special_refusal(path)
    if why is not None:
        raise SampleFilesError(f"{_where(sample_id, key)}: {why}.")
    if path.is_dir():
        try:
            for rel, item in walk(path):
                yield f"{key.rstrip('/')}/{rel}", item
        except (ValueError, OSError) as exc:
            raise SampleFilesError(f"{_where(sample_id, key)}: {exc}.") from None
    elif path.is_file():
        yield key, path
    else:
        raise SampleFilesError(f"{_where(sample_id, key)}: local path '{path}' does not exist "
                               "(or is not a regular file or directory).")


def decode_data_uri(sample_id: object, key: str, value: str) -> bytes:
    header, _, payload = value.partition(",")
    try:
        if header.endswith(";base64"):
            return base64.b64decode(payload, validate=True)
        return urllib.parse.unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise SampleFilesError(f"{_where(sample_id, key)}: invalid data URI ({exc}).") from None


def resolve_sample_files(sample: Sample, base_dir: Path | None = None,
                         limit: int | None = None) -> dict[str, FileValue] | None:
    """Check a sample's files and return them with path strings made absolute ``Path``s (see module doc)."""
    if not sample.files:
        return sample.files
    base = (base_dir or Path.cwd()).resolve()
    resolved: dict[str, FileValue] = {}
    for key, value in sample.files.items():
        _check_key(sample.id, key)
        if isinstance(value, str):
            if value.startswith(("http://", "https://")) and "\n" not in value:
                raise SampleFilesError(f"{_where(sample.id, key)}: URLs are not downloaded ('{value}'); "
                                       "fetch the file and give its local path.")
            if _is_data_uri(value):
                decode_data_uri(sample.id, key, value)  # fail now, not when the sandbox opens
            local = _as_local_path(value, base) if not _is_data_uri(value) else None
            if local is not None and (why := named_path_refusal(local, base)) is not None:
                raise SampleFilesError(f"{_where(sample.id, key)}: {why}.")  # a dataset row is data (_host_paths)
            resolved[key] = local if local is not None else value
        elif isinstance(value, Path):
            path = value.expanduser()
            resolved[key] = (path if path.is_absolute() else base / path).resolve()
        else:
            resolved[key] = value
    _check_size(sample.id, resolved, sample_files_limit() if limit is None else limit)
    return resolved


def _entries(sample_id: object, files: dict[str, FileValue]) -> Iterator[tuple[str, bytes | Path | Link, str]]:
    """(sandbox path, contents or local file, where it came from) for every file to send."""
    for key, value in files.items():
        if isinstance(value, Path):
            for dest, file in _local_entries(sample_id, key, value):
                yield dest, file, str(file)
        elif isinstance(value, bytes):
            yield key, value, "bytes"
        elif _is_data_uri(value):
            yield key, decode_data_uri(sample_id, key, value), "data URI"
        else:
            yield key, value.encode("utf-8"), "inline text"


def _size(sample_id: object, key: str, item: bytes | Path | Link) -> int:
    """A quick first count when the task loads (``st_size``); the bytes read count when the files are packed."""
    if isinstance(item, bytes):
        return len(item)
    if isinstance(item, Link):
        return len(item.target)
    try:
        if not os.access(item, os.R_OK):
            raise SampleFilesError(f"{_where(sample_id, key)}: local file '{item}' is not readable.")
        return item.stat().st_size
    except OSError as exc:
        raise SampleFilesError(f"{_where(sample_id, key)}: cannot read '{item}': {exc.strerror}.") from None


def _check_size(sample_id: object, files: dict[str, FileValue], limit: int) -> int:
    total = 0
    for dest, item, source in _entries(sample_id, files):
        size = _size(sample_id, dest, item)
        total += size
        if total > limit:
            raise SampleFilesError(
                f"Sample {sample_id!r}: files exceed the limit of {limit:,} bytes at '{dest}' (from {source}, "
                f"{size:,} bytes; {total:,} so far). Put large files in the sample's image, or raise {LIMIT_ENV}.")
    return total


def _read(sample_id: object, files: dict[str, FileValue], limit: int) -> list[tuple[str, bytes | Link, bool]]:
    """Every file's contents, counted on the bytes actually read (never ``st_size``): the over-limit
    file is read only up to one byte past what was left."""
    total = 0
    read: list[tuple[str, bytes | Link, bool]] = []
    for dest, item, source in _entries(sample_id, files):
        executable = False
        if isinstance(item, Path):
            try:
                item, executable = read_bounded(item, max(0, limit - total))
            except (OSError, ValueError) as exc:
                raise SampleFilesError(f"{_where(sample_id, dest)}: cannot read '{source}': "
                                       f"{getattr(exc, 'strerror', None) or exc}.") from None
        size = len(item.target) if isinstance(item, Link) else len(item)
        total += size
        if total > limit:
            raise SampleFilesError(
                f"Sample {sample_id!r}: files exceed the limit of {limit:,} bytes at '{dest}' (from {source}, "
                f"at least {size:,} bytes read; {total:,} so far). Put large files in the sample's image, or raise "
                f"{LIMIT_ENV}.")
        read.append((dest, item, executable))
    return read


def _archive(members: Iterable[tuple[str, bytes | Link, bool]]) -> bytes:
    buffer = io.BytesIO()
    now = int(time.time())
    with (gzip.GzipFile(fileobj=buffer, mode="wb", mtime=now, compresslevel=6) as gz,
          tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar):
        for name, item, executable in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = now, 0, 0, "root", "root"
            if isinstance(item, Link):  # a link, as it was: resolved inside the sandbox, never on the host
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, item.target, 0o777
                tar.addfile(info)
                continue
            info.size = len(item)
            info.mode = 0o755 if executable else 0o644
            tar.addfile(info, io.BytesIO(item))
    return buffer.getvalue()


def pack_sample_files(sample_id: object, files: dict[str, FileValue] | None, setup: str | None,
                      limit: int | None = None) -> tuple[dict[str, str], str | None]:
    """The wire form of a sample's files and setup: ``(files, setup)`` for ``SandboxSpec``.

    Relative keys unpack in the sandbox's working directory, absolute ones under ``/``. An unpacking
    failure (e.g. a path the sandbox user may not write) fails the setup with exit status 70 and the
    ``tar`` message, like any setup failure.
    """
    if not files:
        return {}, setup
    relative: list[tuple[str, bytes | Link, bool]] = []
    absolute: list[tuple[str, bytes | Link, bool]] = []
    for dest, item, executable in _read(sample_id, files, sample_files_limit() if limit is None else limit):
        (absolute if dest.startswith("/") else relative).append((dest.lstrip("/"), item, executable))
    wire: dict[str, str] = {}
    lines = ["set -e"]
    for members, target in ((relative, ""), (absolute, " -C /")):
        if not members:
            continue
        carrier = f"/tmp/.toolfleet-files-{uuid.uuid4().hex}.b64"  # noqa: S108 - in the sandbox; a fresh name
        wire[carrier] = base64.b64encode(_archive(members)).decode("ascii")
        where = "the working directory" if not target else "/"
        lines.append(f"base64 -d {carrier} | tar -xzf -{target} || {{ echo \"toolfleet: could not unpack the "
                     f"sample's files into {where}\" >&2; exit {UNPACK_FAILED_EXIT}; }}")
        lines.append(f"rm -f {carrier}")
    script = "\n".join(lines) + "\n"
    script += f"exec sh -c {shlex.quote(setup)}\n" if setup else ""
    return wire, script


def resolve_dataset_files(samples: Iterable[Sample], base_dir: Path | None = None) -> None:
    """Check every sample's files when a task loads, storing the resolved form on each sample."""
    limit = sample_files_limit()
    for sample in samples:
        if sample.files:
            sample.files = resolve_sample_files(sample, base_dir, limit)


def sandbox_files_wire(sample: Sample, base_dir: Path | None = None) -> tuple[dict[str, str], str | None]:
    """A sample's ``(files, setup)`` as they travel in a ``SandboxSpec`` (blocking file I/O: run in a thread)."""
    return pack_sample_files(sample.id, resolve_sample_files(sample, base_dir), sample.setup)
