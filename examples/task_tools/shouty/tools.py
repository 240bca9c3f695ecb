"""A task's own tool: it runs on whichever worker the call reaches, so every worker imports this module."""

from orchestrator.tool import Tool, tool


@tool
def shout() -> Tool:
    async def execute(text: str) -> str:
        """Shout a text back.

        Args:
            text: What to shout.
        """
        return text.upper() + "!"

    return execute
