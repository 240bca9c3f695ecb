"""Define tools and execute one model turn's tool calls in embedded mode.

    python examples/quickstart_tools.py

The "model" here is a hand-written assistant message with five calls: two parallel-safe lookups,
a serial note (a barrier), then two more lookups. The results come back in declared order.
"""

from __future__ import annotations

import asyncio

from rich.console import Console

from orchestrator.log import ToolEvent, Transcript, bind_transcript
from orchestrator.model import ChatMessageAssistant, ChatMessageUser, execute_tools
from orchestrator.tool import ToolCall, ToolError, tool

NOTES: list[str] = []


@tool(parallel=True)
def population():
    async def execute(city: str) -> int:
        """Look up a city's population (millions, made up).

        Args:
            city: The city's name.
        """
        await asyncio.sleep(0.05)
        table = {"Tokyo": 37, "Lagos": 15, "Lima": 11}
        if city not in table:
            raise ToolError(f"Unknown city '{city}'.")
        return table[city]

    return execute


@tool  # serial (the default): a barrier between the parallel stages
def take_note():
    async def execute(text: str) -> str:
        """Write a note down.

        Args:
            text: The note.
        """
        NOTES.append(text)
        return f"noted ({len(NOTES)} notes)"

    return execute


async def main() -> None:
    calls = [
        ToolCall(id="1", function="population", arguments={"city": "Tokyo"}),
        ToolCall(id="2", function="population", arguments={"city": "Atlantis"}),
        ToolCall(id="3", function="take_note", arguments={"text": "Tokyo is big"}),
        ToolCall(id="4", function="population", arguments={"city": "Lagos"}),
        ToolCall(id="5", function="population", arguments={"city": "Lima", "extra": True}),
    ]
    messages = [
        ChatMessageUser(content="Which city is biggest?"),
        ChatMessageAssistant(content="Let me look these up.", tool_calls=calls),
    ]
    transcript = Transcript()
    with bind_transcript(transcript):
        result = await execute_tools(messages, [population(), take_note()])

    console = Console()
    for message in result.messages:
        status = f"[red]{message.error.type}: {message.error.message}[/red]" if message.error else message.text
        console.print(f"[bold]{message.function}[/bold] (call {message.tool_call_id}) → {status}")
    events = transcript.find(ToolEvent)
    console.print(f"{len(events)} tool events recorded; stages ran as [1,2] → [3] → [4,5].")


if __name__ == "__main__":
    asyncio.run(main())
