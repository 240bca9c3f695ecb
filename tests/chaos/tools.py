"""The chaos soak's own tool, imported by its workers (``--import tests.chaos.tools``) and by the task file.

``note`` is serial (a barrier between the stages of a turn) and runs on the worker holding the sample's
sandbox, like any tool from task code.
"""

from __future__ import annotations

from orchestrator.tool import tool
from orchestrator.util import sandbox
from tests.chaos._script import LOG


@tool(parallel=False)
def note():
    async def execute(line: str) -> str:
        """Append a line to the sample's log.

        Args:
            line: The line.
        """
        result = await sandbox().exec(["sh", "-c", f"printf '%s\\n' {line} >> {LOG}"])
        if not result.success:
            raise RuntimeError(f"note failed: {result.stderr.strip()[:200]}")
        return f"noted {line}"

    return execute
