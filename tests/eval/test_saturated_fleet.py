"""Saturation is not an error, at the eval level: 24 samples on 2 single-thread workers whose message age
limit is 2 s, each sample making calls with no sandbox (the shared queue `toolfleet.calls`) that take up to
2.6 s. Messages wait in the queue past the limit and are refused as expired; the orchestrator sends them
again (`docs/faults.md`), and the eval finishes with every sample scored. Before, the first refusal
stopped the eval as a clock problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async, scripted_policy
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.scorer import includes
from orchestrator.solver import generate, sample_state, use_tools
from tests.support.sample_tools import sleeper

pytestmark = [pytest.mark.celery, pytest.mark.timeout(300)]

SAMPLES, TURNS = 24, 3


@scripted_policy("sleep_in_line")
def _sleep_in_line(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """TURNS calls of different lengths per sample (so the samples' stages drift apart into messages of
    their own), then the answer."""
    state = sample_state()
    assert state is not None
    done = sum(isinstance(m, ChatMessageTool) for m in messages)
    if done < TURNS:
        seconds = 0.2 + ((int(str(state.sample_id)[1:]) + done) % 5) * 0.6
        return ModelOutput.for_tool_call("scripted", "sleeper", {"seconds": seconds})
    return ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")


async def test_an_eval_queued_past_the_message_age_limit_finishes_every_sample_scored(tmp_path: Path, fleet) -> None:
    workers = [fleet.worker(concurrency=1, extra_args=("--message-max-age", "2")) for _ in range(2)]
    task = Task(dataset=[Sample(input="go", target=f"answer-{i}", id=f"s{i}") for i in range(SAMPLES)],
                solver=[use_tools(sleeper()), generate()], scorer=includes())
    [log] = await eval_async(task, "scripted/sleep_in_line", log_dir=tmp_path, broker=fleet.redis.url)
    assert log.status == "success", [s.error for s in log.samples if s.error]
    assert [s.scores["includes"].value for s in log.samples] == ["C"] * SAMPLES
    assert all(sum(isinstance(m, ChatMessageTool) and m.content == "done" for m in s.messages) == TURNS
               for s in log.samples), [s.messages for s in log.samples]
    # The fleet was saturated: some message did age out in the queue and was refused (and sent again).
    assert any("stale: expired" in w.output() for w in workers), [w.output()[-2000:] for w in workers]
