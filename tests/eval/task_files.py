"""Paths to the task files the eval and CLI tests run (they are real task files, imported by path)."""

from pathlib import Path

HERE = Path(__file__).parent
BASIC = HERE / "tasks" / "basic.py"
FLAKY = HERE / "tasks" / "flaky.py"
BATCH_REACT = HERE / "tasks" / "batch_react.py"
REACT_TOOLS = HERE / "tasks" / "react_tools.py"
