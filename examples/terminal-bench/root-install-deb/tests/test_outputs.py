import os
import pwd
import subprocess
from pathlib import Path

ALICE = pwd.getpwnam("alice")


def test_package_installed():
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", "tbtool"], capture_output=True, check=False,
                            text=True)
    assert status.stdout == "install ok installed 1.0.0", status.stdout + status.stderr
    assert subprocess.run(["tbtool"], capture_output=True, text=True, check=False).stdout.strip() == "tbtool 1.0.0"


def test_handoff_owned_by_alice():
    for path in (Path("/app/handoff"), Path("/app/handoff/tool.txt")):
        info = os.stat(path)
        assert (info.st_uid, info.st_gid) == (ALICE.pw_uid, ALICE.pw_gid), f"{path} is {info.st_uid}:{info.st_gid}"
    assert Path("/app/handoff/tool.txt").read_text().strip() == "tbtool 1.0.0"


def test_secret_copied():
    assert Path("/app/secret-copy.txt").read_text() == Path("/home/alice/secret.txt").read_text()
    assert Path("/app/secret-copy.txt").read_text().strip() == "the owl flies at midnight"
