"""Every Python example in docs/porting-from-inspect.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "porting-from-inspect.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _examples() -> list[str]:
    return _BLOCK.findall(GUIDE.read_text())


def test_the_guide_has_examples() -> None:
    assert len(_examples()) >= 5


@pytest.mark.parametrize("index", range(len(_examples())))
def test_example_runs(index: int) -> None:
    source = _examples()[index]
    namespace = {"__name__": f"porting_guide_example_{index}"}
    exec(compile(source, f"{GUIDE.name}[example {index + 1}]", "exec"), namespace)  # noqa: S102 - the guide's own examples
