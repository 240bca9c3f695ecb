"""A task whose tool comes from a package of its own (examples/task_tools), run on a fleet whose workers
carry it in their image:

    deploy/build-tools-image.sh examples/task_tools shouty.tools toolfleet/toolfleet-tools:latest
    docker-compose -f docker-compose.yml -f deploy/compose.tools.yml up -d --no-build --scale worker=2 redis worker
    docker-compose -f docker-compose.yml -f deploy/compose.tools.yml run --rm --no-deps orchestrator \\
        toolfleet eval examples/task_tools_eval.py --model scripted --log-dir /logs --display none

Workers without it are refused before any sample starts (preflight), in one line.
"""

from shouty.tools import shout

from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.model import ChatMessageAssistant, ModelOutput, execute_tools
from orchestrator.scorer import includes
from orchestrator.solver import Generate, TaskState, solver
from orchestrator.tool import ToolCall


@solver
def call_shout():
    """One call of the package's tool, with the sample's input; its result is the answer."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.messages.append(ChatMessageAssistant(content="", tool_calls=[
            ToolCall(id="shout-1", function="shout", arguments={"text": state.input_text})]))
        result = await execute_tools(state.messages, [shout()])
        state.messages.extend(result.messages)
        state.output = ModelOutput.from_content("scripted", result.messages[0].text)
        return state

    return solve


@task
def shouting() -> Task:
    words = ("hi", "fleet", "tools")
    return Task(dataset=[Sample(input=w, target=w.upper() + "!") for w in words], solver=call_shout(),
                scorer=includes())
