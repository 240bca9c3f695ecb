import hashlib
import json
import os
import urllib.request
from pathlib import Path

DATASET = Path("/app/data/dataset.bin")
NAME = "files/dataset-4m.bin"


def published():
    """The dataset's size and sha256 as the site publishes them (fetched while grading)."""
    url = os.environ["TB_INTERNET_URL"].rstrip("/") + "/manifest.json"
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)["files"][NAME]


def stats():
    return json.loads(Path("/app/stats.json").read_text())


def test_the_image_holds_the_published_dataset():
    data = DATASET.read_bytes()
    assert hashlib.sha256(data).hexdigest() == published()["sha256"], "the dataset is not the published one"


def test_size_and_digest():
    expected = published()
    assert stats()["size"] == expected["size"]
    assert stats()["sha256"] == expected["sha256"]


def test_zero_bytes():
    assert stats()["zero_bytes"] == DATASET.read_bytes().count(0)
