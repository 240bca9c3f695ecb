import importlib.metadata
from pathlib import Path


def test_packages_came_from_the_index():
    assert importlib.metadata.version("tbcalc") == "1.0.0"
    assert importlib.metadata.version("tbhello") == "1.0.0"  # tbcalc's dependency, resolved by pip


def test_mean():
    assert float(Path("/app/mean.txt").read_text()) == 14.0


def test_banner():
    assert Path("/app/banner.txt").read_text().strip() == "HELLO, TERMINAL BENCH"
