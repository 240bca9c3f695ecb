"""Write the test internet's site into a directory (run once, at image build, inside the image).

What it serves stands for what Terminal-Bench tasks fetch from the real internet:

- ``install.sh``: an installer piped to ``sh`` (as ``curl -LsSf https://astral.sh/uv/install.sh | sh``) that
  puts the ``tbrun`` test runner (``runner/tbrun``) in ``$HOME/.local/bin``;
- ``files/``: downloads of a known size and checksum (a dataset of 4 MiB, model weights of 50 MiB);
- ``simple/`` and ``packages/``: a PEP 503 package index with two pure-Python wheels (``tbcalc`` depends on
  ``tbhello``), for ``pip install --index-url URL/simple``;
- ``debs/``: a Debian package (``tbtool``) for a root task to ``dpkg -i``;
- ``SHA256SUMS`` and ``manifest.json``: each file's checksum (and size), for verifiers and tests.

Downloads and wheels have the same bytes on every build (seeded content, fixed zip dates); every file's checksum,
the .deb's included, is published in ``SHA256SUMS``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MIB = 1024 * 1024
DOWNLOADS = {"files/dataset-4m.bin": 4 * MIB, "files/weights-50m.bin": 50 * MIB}
RUNNER_VERSION = "1.0.0"
# name -> (version, {path in the wheel: source}, Requires-Dist entries)
PACKAGES = {
    "tbhello": ("1.0.0", {"tbhello/__init__.py": '__version__ = "1.0.0"\n\n\ndef greet(name):\n'
                                                 '    return f"hello, {name}"\n'}, []),
    "tbcalc": ("1.0.0", {"tbcalc/__init__.py": '"""Small statistics, and a greeting borrowed from tbhello."""\n'
                                               "from tbhello import greet\n\n"
                                               '__version__ = "1.0.0"\n\n\n'
                                               "def mean(values):\n"
                                               "    values = [float(v) for v in values]\n"
                                               "    return sum(values) / len(values)\n\n\n"
                                               "def banner(name):\n"
                                               "    return greet(name).upper()\n"}, ["tbhello>=1.0"]),
}
DEB = ("tbtool", "1.0.0")


def seeded_bytes(seed: str, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(out: Path, name: str, version: str, files: dict[str, str], requires: list[str]) -> Path:
    """A pure-Python wheel (PEP 427): the modules, METADATA, WHEEL and a RECORD of their hashes."""
    dist_info = f"{name}-{version}.dist-info"
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: test internet package {name}\n"
        + "".join(f"Requires-Dist: {req}\n" for req in requires)).encode()
    contents[f"{dist_info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: toolfleet-test-internet\n"
                                      b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items())
    contents[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in contents.items():
            wheel.writestr(zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


def write_index(site: Path, wheels: dict[str, Path]) -> None:
    """PEP 503's simple index: one page listing the projects, one per project linking its files."""
    simple = site / "simple"
    links = "".join(f'<a href="{name}/">{name}</a><br>\n' for name in sorted(wheels))
    (simple / "index.html").parent.mkdir(parents=True, exist_ok=True)
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    for name, wheel in wheels.items():
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        page = simple / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<!DOCTYPE html>\n<html><body>\n<a href="../../packages/{wheel.name}#sha256={digest}">'
                        f"{wheel.name}</a><br>\n</body></html>\n")


def write_deb(site: Path) -> Path:
    """``tbtool``: ``/usr/bin/tbtool`` (prints its version) and ``/usr/share/tbtool/VERSION``."""
    name, version = DEB
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: toolfleet tests <tests@invalid>\n"
            f"Description: a package the test internet serves\n")
        (root / "usr" / "bin").mkdir(parents=True)
        tool = root / "usr" / "bin" / name
        tool.write_text(f"#!/bin/sh\necho '{name} {version}'\n")
        tool.chmod(0o755)
        (root / "usr" / "share" / name).mkdir(parents=True)
        (root / "usr" / "share" / name / "VERSION").write_text(version + "\n")
        out = site / "debs" / f"{name}_{version}_all.deb"
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def make_site(assets: Path, site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(assets / "install.sh", site / "install.sh")  # a template: the server fills in its address
    runner = site / "runner" / "tbrun"
    runner.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(assets / "tbrun", runner)
    runner.chmod(0o755)
    (site / "runner" / "tbrun.sha256").write_text(f"{hashlib.sha256(runner.read_bytes()).hexdigest()}  tbrun\n")
    for rel, size in DOWNLOADS.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(seeded_bytes(rel, size))
    packages = site / "packages"
    packages.mkdir(exist_ok=True)
    wheels = {name: write_wheel(packages, name, version, files, requires)
              for name, (version, files, requires) in PACKAGES.items()}
    write_index(site, wheels)
    write_deb(site)

    checksummed = sorted(p for p in site.rglob("*")
                         if p.is_file() and p.parent != site / "simple" and p.parent.parent != site / "simple"
                         and p.name != "install.sh")
    sums = {p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in checksummed}
    (site / "SHA256SUMS").write_text("".join(f"{digest}  {rel}\n" for rel, digest in sums.items()))
    manifest = {
        "files": {rel: {"size": (site / rel).stat().st_size, "sha256": digest} for rel, digest in sums.items()},
        "runner_version": RUNNER_VERSION,
        "packages": {name: version for name, (version, _, _) in PACKAGES.items()},
        "deb": {"name": DEB[0], "version": DEB[1]},
    }
    (site / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    os.umask(0o022)
    make_site(Path(sys.argv[1]), Path(sys.argv[2]))
