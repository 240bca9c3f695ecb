from pathlib import Path

TOTAL = Path("/app/total.txt")


def test_total_exists():
    assert TOTAL.is_file(), "/app/total.txt is missing"


def test_total_is_the_tools_quantity():
    assert TOTAL.read_text().strip() == "77", f"got {TOTAL.read_text()!r}, expected 77"
