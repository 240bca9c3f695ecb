"""The chaos soak's task file: scripted agents whose every tool call leaves one countable line in its sandbox.

``--model scripted/chaos`` plays each sample's script (``_script.script``); ``chaos`` is the task. Tools:
``bash`` and ``python`` (parallel), ``note`` (serial, from ``tests/chaos/tools.py``, which the workers import);
an approver rejects ``# deny`` commands and modifies ``# modify`` ones; a reviewer reads every ``python``
result. Every ``snapshot_every``-th sample also snapshots its sandbox after its first turn and reads its log
in a fork (a docker sandbox only; a refusal, such as a full snapshot disk, is recorded in the sample's
metadata and the sample goes on). The scorer reads ``chaos.log`` and counts missing, duplicated and foreign
lines (``_script.line_faults``): value ``C`` only when the log holds each expected line exactly once.
"""

from __future__ import annotations

from typing import Any

from orchestrator.approval import Approval, ApprovalPolicy
from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.eval._policies import scripted_policy
from orchestrator.model import ModelOutput
from orchestrator.review import Review, ReviewPolicy
from orchestrator.scorer import Score, Target, scorer
from orchestrator.solver import TaskState, sample_state, solver, use_tools
from orchestrator.tool import ToolCall, bash, python
from orchestrator.util import SnapshotError, fork, sandbox
from tests.chaos._script import (
    DENY,
    LOG,
    MODIFY,
    expected_lines,
    line_faults,
    modified,
    script,
)
from tests.chaos.tools import note

SAMPLE_PREFIX = "c"


def sample_ids(n: int) -> list[str]:
    return [f"{SAMPLE_PREFIX}{i:05d}" for i in range(n)]


def sample_input(sample_id: str, seed: int) -> str:
    """The first user message: what a provider's stand-in reads to play the same script (batch mode)."""
    return f"chaos sample {sample_id} seed {seed}: run your script."


@scripted_policy("chaos")
def play(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None and state.sample_id is not None
    turns = script(str(state.sample_id), int(state.metadata["seed"]))
    done = sum(1 for m in messages if m.role == "assistant")
    if done >= len(turns):
        return ModelOutput.from_content("chaos", "done")
    return ModelOutput.for_tool_calls("chaos", [ToolCall(id=c.id, function=c.function, arguments=dict(c.arguments))
                                                for c in turns[done]])


async def _approve(message: str, call: ToolCall, view: Any, history: list[Any]) -> Approval:
    cmd = str(call.arguments.get("cmd", ""))
    if cmd.endswith(DENY):
        return Approval(decision="reject", explanation="denied by the chaos approver")
    if cmd.endswith(MODIFY):
        return Approval(decision="modify", modified=call.model_copy(update={"arguments": {"cmd": modified(cmd)}}))
    return Approval(decision="approve")


async def _review(message: str, call: ToolCall, result: Any, output: Any, view: Any, history: list[Any]) -> Review:
    return Review(decision="continue", explanation="read by the chaos reviewer")


async def _probe_snapshot(state: TaskState) -> None:
    """Snapshot the sandbox, read the log in a fork: it must be the sandbox's own at that moment."""
    try:
        snap = await sandbox().snapshot()
        async with fork(snap, 1) as [box]:
            seen = await box.exec(["cat", LOG])
        mine = await sandbox().exec(["cat", LOG])
        state.metadata["snapshot"] = "same" if seen.stdout == mine.stdout else "differs"
    except SnapshotError as exc:
        state.metadata["snapshot"] = f"refused: {exc}"


@solver
def chaos_agent(snapshot_every: int = 0):
    async def solve(state: TaskState, generate: Any) -> TaskState:
        probe = snapshot_every > 0 and int(str(state.sample_id)[len(SAMPLE_PREFIX):]) % snapshot_every == 0
        turn = 0
        while True:
            state = await generate(state, tool_calls="single")
            turn += 1
            if not state.output.message.tool_calls:
                return state
            if probe and turn == 1:
                await _probe_snapshot(state)

    return solve


@scorer(metrics=[])
def side_effects():
    async def score(state: TaskState, target: Target) -> Score:
        read = await sandbox().exec(["sh", "-c", f"cat {LOG} 2>/dev/null || true"])
        found = read.stdout.split()
        expected = expected_lines(script(str(state.sample_id), int(state.metadata["seed"])))
        faults = line_faults(expected, found)
        probe = state.metadata.get("snapshot")
        return Score(value="C" if not any(faults.values()) else "I",
                     metadata={**faults, "lines": len(found), **({"snapshot": probe} if probe else {})})

    return score


@task
def chaos(samples: int = 20, seed: int = 0, sandbox: str = "docker", snapshot_every: int = 0) -> Task:
    config: Any = {"type": "docker", "image": "toolfleet/sandbox:latest"} if sandbox == "docker" else "local"
    return Task(
        dataset=[Sample(id=s, input=sample_input(s, seed), metadata={"seed": seed}) for s in sample_ids(samples)],
        solver=[use_tools(bash(), python(), note()), chaos_agent(snapshot_every)],
        scorer=side_effects(),
        sandbox=config,
        approval=[ApprovalPolicy(_approve, "bash"), ApprovalPolicy(_auto, "*")],
        review=[ReviewPolicy(_review, "python")],
    )


async def _auto(message: str, call: ToolCall, view: Any, history: list[Any]) -> Approval:
    return Approval(decision="approve")


@solver
def fill(mb: int, hold: float):
    """Fill this sandbox's host's snapshot disk: a large file, then snapshots of it until one is refused."""

    async def solve(state: TaskState, generate: Any) -> TaskState:
        import asyncio

        await sandbox().exec(["dd", "if=/dev/zero", "of=ballast", "bs=1M", f"count={mb}"])
        taken = 0
        for _ in range(16):
            try:
                await sandbox().snapshot()
                taken += 1
            except SnapshotError as exc:
                state.metadata["refused"] = str(exc)
                break
        state.metadata["taken"] = taken
        await asyncio.sleep(hold)  # the disk stays full meanwhile; the eval's end removes the snapshots
        return state

    return solve


@scorer(metrics=[])
def filled():
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value="C" if "refused" in state.metadata else "I", metadata=dict(state.metadata))

    return score


@task
def fill_snapshots(mb: int = 24, hold: float = 20.0) -> Task:
    return Task(dataset=[Sample(id="filler", input="fill the snapshot disk")], solver=fill(mb, hold), scorer=filled(),
                sandbox={"type": "docker", "image": "toolfleet/sandbox:latest"})
