"""A tool module no worker imports (the attack is a message naming it as its tool's module)."""

from orchestrator.tool import tool


@tool
def evil():
    async def execute() -> str:
        """Would run on the worker."""
        return "evil ran"

    return execute
