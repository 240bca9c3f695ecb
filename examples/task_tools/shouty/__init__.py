"""An example package holding a task's own tools (see examples/task_tools_eval.py)."""
