import hashlib
import importlib.metadata
import json
import os
import urllib.request
from pathlib import Path

MODEL = Path("/app/model")


def published():
    url = os.environ["TB_INTERNET_URL"].rstrip("/") + "/manifest.json"
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)["files"]["files/weights-50m.bin"]


def test_weights_are_the_published_ones():
    digest = hashlib.sha256()
    with open(MODEL / "weights.bin", "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    expected = published()
    assert (MODEL / "weights.bin").stat().st_size == expected["size"]
    assert digest.hexdigest() == expected["sha256"]


def test_checksum_file():
    assert (MODEL / "weights.sha256").read_text().strip() == published()["sha256"]


def test_package_installed_from_the_index():
    assert importlib.metadata.version("tbhello") == "1.0.0"


def test_greeting():
    assert (MODEL / "greeting.txt").read_text().strip() == "hello, weights"
