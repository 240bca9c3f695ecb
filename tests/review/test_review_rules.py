"""Tool-result review, one rule per test, run over every dispatcher.

Each test's name starts with ``s<NN>`` (the rules in the order ``orchestrator/review`` states them) and
its docstring states the rule it checks. Rules about agents (handoff, react) and evals
(Task/eval/--review) are covered in ``test_review_agents.py`` and ``test_review_eval.py``; the human
reviewer's console in ``test_review_console.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator._wire import CallRequest, ToolExecutionFatal
from orchestrator.approval import Approval, ApprovalPolicy
from orchestrator.dispatch import Dispatcher, reset_active_dispatcher, set_active_dispatcher
from orchestrator.log import InfoEvent, ReviewEvent, ToolEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatMessageAssistant,
    ChatMessageUser,
    ExecuteToolsResult,
    ModelOutput,
    ModelUsage,
    execute_tools,
    get_model,
    usage_scope,
)
from orchestrator.review import (
    Review,
    ReviewPolicy,
    active_review_policy,
    cancel_review,
    pending_reviews,
    resolve_review,
    review_policy_from_file,
    review_policy_scope,
    reviewer,
)
from orchestrator.tool import ToolCall
from orchestrator.util import LimitExceededError, TerminateSampleError
from orchestrator.util._limits import check_limits, record_turn, time_limit, token_limit, turn_limit
from tests.distributed._helpers import starts
from tests.review import review_tools as rt
from tests.support import sample_tools as st
from tests.support.waits import until
from workers.executor import execute_call

TOOLS = [st.add(), st.text_of_size(), st.fail(), st.sleeper(), st.gated(), rt.curl(), rt.shell(),
         rt.raise_approval_error(), rt.chatty()]

pytestmark = pytest.mark.timeout(60)


def calls(*specs: tuple[str, dict[str, Any]]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", function=fn, arguments=args) for i, (fn, args) in enumerate(specs)]


async def run(dispatcher: Dispatcher, tool_calls: list[ToolCall], tools: list[Any] = TOOLS, text: str = "",
              transcript: Transcript | None = None, **kwargs: Any) -> tuple[ExecuteToolsResult, Transcript]:
    """Execute one assistant turn the way a sample does (bound dispatcher and transcript)."""
    transcript = transcript or Transcript()
    messages = [ChatMessageUser(content="do it"), ChatMessageAssistant(content=text, tool_calls=tool_calls)]
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript):
            result = await execute_tools(messages, tools, **kwargs)
    finally:
        reset_active_dispatcher(token)
    return result, transcript


def policy(decision: str = "continue", tools: str | list[str] = "*", seen: list | None = None,
           **kw: Any) -> ReviewPolicy:
    return ReviewPolicy(rt.scripted_review(decision, seen=seen, **kw), tools=tools)


def _events(log: str) -> list[tuple[str, str]]:
    """What the ``gated`` tool recorded, in order: (start|end|cancelled, label)."""
    try:
        with open(log) as f:
            return [(line.split()[0], line.split()[1]) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def kinds(transcript: Transcript) -> list[str]:
    return [e.event for e in transcript.events]


def reviews(transcript: Transcript) -> list[tuple[str | None, str, str]]:
    return [(e.reviewer, e.call.id, e.decision) for e in transcript.find(ReviewEvent)]


async def until_pending(call_id: str, bound: float = 10.0) -> None:
    """Wait (bounded) until ``call_id``'s review is pending."""
    async with asyncio.timeout(bound):
        while not any(p.call.id == call_id for p in pending_reviews()):
            await asyncio.sleep(0.01)


@reviewer(name="blocking_review")
def blocking_review(release: asyncio.Event | None = None) -> Any:
    """A reviewer that waits (like a human would) until released; it then continues."""

    async def review(message, call, result, output, view, history) -> Review:
        await (release or asyncio.Event()).wait()
        return Review(decision="continue")

    return review


# -- the opening summary -------------------------------------------------------------------------


async def test_s01_review_happens_after_the_tool_returned_and_before_the_result_reaches_the_model(
    dispatcher, tmp_path) -> None:
    """"Review happens after the tool has returned and before the result is handed back to the model."""
    marker = tmp_path / "side-effect"
    seen: list = []
    with pytest.raises(TerminateSampleError):
        await run(dispatcher, calls(("sleeper", {"seconds": 0, "marker": str(marker)})),
                  review=[policy("terminate", seen=seen)])
    # The tool had returned (its side effect exists, the reviewer saw its result) ...
    assert marker.read_text() == "finished" and seen[0]["output"] == "done"
    # ... and the result never reached the model: execute_tools raised instead of returning messages.
    result, _ = await run(dispatcher, calls(("sleeper", {"seconds": 0})), review=[policy("continue")])
    assert [m.text for m in result.messages] == ["done"]


async def test_s02_results_no_policy_covers_continue(dispatcher) -> None:
    """"Results that no policy covers continue."""
    seen: list = []
    result, transcript = await run(dispatcher, calls(("add", {"x": 1, "y": 2})),
                                   review=[policy("terminate", tools="curl", seen=seen)])
    assert [m.text for m in result.messages] == ["3"]
    assert seen == [] and transcript.find(ReviewEvent) == []


async def test_s03_tool_results_of_bridged_agents_are_not_reviewed() -> None:
    """"Tool results of bridged agents are currently not reviewed." A tool loop that does not go through
    ``execute_tools`` (a bridge runs its own) is never reviewed, even with a policy active: review lives
    in the tool-execution loop, not in the execution engine."""
    seen: list = []
    transcript = Transcript()
    request = CallRequest(call_id="bridge-1", function="curl", tool=None, arguments={"url": "http://example.com"})
    with bind_transcript(transcript), review_policy_scope([policy("terminate", seen=seen)]):
        outcome = await execute_call(request, tool=rt.curl())
    assert "HTTP/1.1 200" in outcome.result
    assert seen == [] and transcript.find(ReviewEvent) == []


async def test_s04_a_reviewer_can_end_a_sample_on_evidence_only_in_the_tool_output(dispatcher) -> None:
    """"... so it can end a sample on evidence that exists only in the tool's output (e.g. a command the
    policy requires to fail succeeded)."""

    async def must_fail(message, call, result, output, view, history) -> Review:
        if result.error is None:
            return Review(decision="terminate",
                          explanation=f"{call.function} was required to fail but returned {output!r}.")
        return Review(decision="continue")

    # "none" is not an error kind: the command succeeds, which the policy forbids.
    with pytest.raises(TerminateSampleError, match="required to fail but returned 'no error'"):
        await run(dispatcher, calls(("fail", {"kind": "none"})), review=[ReviewPolicy(must_fail, tools="fail")])
    result, _ = await run(dispatcher, calls(("fail", {"kind": "tool_error"})),
                          review=[ReviewPolicy(must_fail, tools="fail")])
    assert result.messages[0].error.type == "unknown"


async def test_s05_policy_is_ordered_and_the_first_non_escalating_reviewer_decides(dispatcher) -> None:
    """"Each policy names a reviewer and the tools it covers; policies are evaluated in order, and the
    first reviewer that does not escalate decides."""
    first, second, third = [], [], []
    review = [policy("escalate", seen=first), policy("continue", tools="add", seen=second),
              policy("terminate", seen=third)]
    result, transcript = await run(dispatcher, calls(("add", {"x": 2, "y": 2})), review=review)
    assert [m.text for m in result.messages] == ["4"]
    assert (len(first), len(second), len(third)) == (1, 1, 0)
    assert reviews(transcript) == [("scripted_review", "c0", "escalate"), ("scripted_review", "c0", "continue")]


async def test_s06_escalate_hands_over_like_an_approver(dispatcher) -> None:
    """"Escalate (not deciding, handing this one to the next reviewer) works as for approvers." An
    escalation skips reviewers whose tools do not match and lands on the next matching one."""
    skipped: list = []
    review = [policy("escalate"), policy("continue", tools="curl", seen=skipped),
              policy("terminate", tools=["add", "fail"])]
    with pytest.raises(TerminateSampleError):
        await run(dispatcher, calls(("add", {"x": 1, "y": 1})), review=review)
    assert skipped == []


# -- decisions -----------------------------------------------------------------------------------


async def test_s07_continue_hands_the_result_back_unchanged(dispatcher) -> None:
    """"`continue`: the result is handed back to the model as is."""
    specs = calls(("text_of_size", {"n": 40000}), ("add", {"x": 5, "y": 6}), ("fail", {"kind": "not_found"}))
    plain, _ = await run(dispatcher, specs)
    reviewed, transcript = await run(dispatcher, specs, review=[policy("continue")])
    strip = lambda r: [m.model_dump(exclude={"id"}) for m in r.messages]  # noqa: E731 - a one-line local helper
    assert strip(reviewed) == strip(plain)
    assert [d for _, _, d in reviews(transcript)] == ["continue"] * 3


async def test_s08_terminate_is_an_operator_limit_and_cancels_running_parallel_calls(dispatcher, tmp_path) -> None:
    """"`terminate`: the sample ends and is recorded as an operator limit, exactly like an approver's
    `terminate`. Parallel tool calls still running are cancelled."""
    log, gate = str(tmp_path / "log"), tmp_path / "gate"  # the gate never opens: only a cancel ends the call

    def specs(label: str) -> list[ToolCall]:
        return calls(("add", {"x": 1, "y": 2}), ("gated", {"path": log, "label": label, "gate": str(gate)}))

    def terminate_once_running(label: str, explanation: str | None = None) -> ReviewPolicy:
        async def review(message, call, result, output, view, history) -> Review:  # type: ignore[no-untyped-def]
            await until(lambda: starts(log, label) == 1, f"the parallel call {label} to be running")
            return Review(decision="terminate", explanation=explanation)

        return ReviewPolicy(review, tools="add")

    with pytest.raises(TerminateSampleError) as reviewed:
        await run(dispatcher, specs("first"), review=[terminate_once_running("first", "stop now")])
    assert reviewed.value.reason == "stop now"

    async def approver_terminates(message, call, view, history) -> Approval:
        return Approval(decision="terminate", explanation="stop now")

    with pytest.raises(TerminateSampleError) as approved:  # the same exception an approver's terminate raises
        await run(dispatcher, calls(("add", {"x": 1, "y": 2})), approval=[ApprovalPolicy(approver_terminates, "*")])
    assert type(reviewed.value) is type(approved.value)

    transcript = Transcript()
    with pytest.raises(TerminateSampleError):
        await run(dispatcher, specs("second"), review=[terminate_once_running("second")], transcript=transcript)
    events = {e.id: e for e in transcript.find(ToolEvent)}
    assert events["c0"].result == "3" and events["c0"].error is None
    assert events["c1"].error is not None and events["c1"].error.type == "cancelled"
    # Stopped, not abandoned: each running call saw its cancellation (where it runs, a worker included).
    await until(lambda: sorted(_events(log)) == [("cancelled", "first"), ("cancelled", "second"), ("start", "first"),
                                                 ("start", "second")], "both calls to record their cancellation")


async def test_s09_escalate_lets_the_next_matching_reviewer_decide(dispatcher) -> None:
    """"`escalate`: the next matching reviewer in the policy decides."""
    review = [policy("escalate"), policy("terminate", tools="curl"), policy("continue", tools="add")]
    result, transcript = await run(dispatcher, calls(("add", {"x": 1, "y": 1})), review=review)
    assert [m.text for m in result.messages] == ["2"]
    assert [d for _, _, d in reviews(transcript)] == ["escalate", "continue"]


def test_s10_there_is_no_reject_and_no_modify() -> None:
    """"There is no reject and no modify: the call has already run; there is nothing to reject or rewrite."""
    for decision in ("reject", "modify", "approve"):
        with pytest.raises(ValidationError):
            Review(decision=decision)  # type: ignore[arg-type]
    assert not hasattr(Review(decision="continue"), "modified")


async def test_s11_uncovered_results_and_all_escalations_continue(dispatcher) -> None:
    """"A result no policy covers, or one every matching reviewer escalates, continues."""
    result, transcript = await run(dispatcher, calls(("add", {"x": 1, "y": 1}), ("curl", {"url": "http://x"})),
                                   review=[policy("escalate", tools="add"), policy("escalate", tools="add")])
    assert next(m.text for m in result.messages) == "2" and "HTTP/1.1 200" in result.messages[1].text
    # The two escalations are recorded, then the outcome (nobody picked it up: continue); curl: nothing.
    assert reviews(transcript) == [("scripted_review", "c0", "escalate"), ("scripted_review", "c0", "escalate"),
                                   (None, "c0", "continue")]
    assert transcript.find(ReviewEvent)[-1].explanation == "All reviewers escalated."


# -- what is reviewed ----------------------------------------------------------------------------


async def test_s12_only_executed_calls_are_reviewed(dispatcher) -> None:
    """"Only calls that actually executed are reviewed. Calls rejected by an approver, or that failed
    argument parsing before running, produced no result and are not reviewed."""

    async def reject_curl(message, call, view, history) -> Approval:
        return Approval(decision="reject" if call.function == "curl" else "approve")

    seen: list = []
    specs = calls(("curl", {"url": "http://x"}), ("add", {"x": "not a number", "y": 1}), ("nope", {}),
                  ("add", {"x": 1, "y": 1}))
    specs.append(ToolCall(id="c4", function="add", parse_error="Expecting value: line 1 column 1"))
    result, transcript = await run(dispatcher, specs, review=[policy("continue", seen=seen)],
                                   approval=[ApprovalPolicy(reject_curl, "*")])
    kinds = [m.error.type if m.error else None for m in result.messages]
    assert kinds == ["approval", "parsing", "parsing", None, "parsing"]
    assert [s["call"].id for s in seen] == ["c3"]
    assert reviews(transcript) == [("scripted_review", "c3", "continue")]


async def test_s14_errors_from_executed_tools_are_reviewed_including_parsing_and_approval_errors(dispatcher) -> None:
    """"Errors raised by executed tools are reviewed whenever they would be handed back to the model,
    including parse errors or approval errors raised from inside the tool."""
    seen: list = []
    specs = calls(("fail", {"kind": "parsing"}), ("raise_approval_error", {"message": "inner approval said no"}),
                  ("fail", {"kind": "timeout"}))
    _result, transcript = await run(dispatcher, specs, review=[policy("continue", seen=seen)])
    by_call = {s["call"].id: s["result"].error for s in seen}
    assert {k: (v.type, v.message) for k, v in by_call.items()} == {
        "c0": ("parsing", "bad input shape"),
        "c1": ("approval", "inner approval said no"),
        "c2": ("timeout", "Command timed out before completing."),
    }
    assert sorted(c for _, c, _ in reviews(transcript)) == ["c0", "c1", "c2"]


# -- custom reviewers and their arguments ---------------------------------------------------------


async def test_s22_a_custom_reviewer_is_an_async_function_returning_a_review(dispatcher) -> None:
    """"A reviewer is an async function. It receives the tool call, the call's result and the conversation,
    and returns a Review." (The design's ``no_network`` example, registered with ``@reviewer``.)"""
    with pytest.raises(TerminateSampleError, match=r"The agent reached the network\."):
        await run(dispatcher, calls(("curl", {"url": "http://example.com"})),
                  review=[ReviewPolicy(rt.no_network(), tools="*")])
    _result, transcript = await run(dispatcher, calls(("add", {"x": 1, "y": 1})),
                                    review=[ReviewPolicy(rt.no_network())])
    assert reviews(transcript) == [("no_network", "c0", "continue")]


async def test_s23a_message_is_the_assistant_text_beside_the_call(dispatcher) -> None:
    """"`message`: the text the assistant wrote alongside this tool call."""
    seen: list = []
    await run(dispatcher, calls(("add", {"x": 1, "y": 1})), text="Let me add these.", review=[policy(seen=seen)])
    assert seen[0]["message"] == "Let me add these."


async def test_s23b_call_is_the_executed_call_with_approver_modifications(dispatcher) -> None:
    """"`call`: the call as actually executed (including any modification made by an approver)."""

    async def double_x(message, call, view, history) -> Approval:
        return Approval(decision="modify", modified=ToolCall(id=call.id, function=call.function,
                                                             arguments={
                                                                 **call.arguments, "x": call.arguments["x"] * 2}))

    seen: list = []
    result, _ = await run(dispatcher, calls(("add", {"x": 10, "y": 1})), review=[policy(seen=seen)],
                          approval=[ApprovalPolicy(double_x, "*")])
    assert result.messages[0].text == "21"
    assert seen[0]["call"].arguments == {"x": 20, "y": 1}


async def test_s23c_result_is_the_tool_message_truncated_to_max_output(dispatcher) -> None:
    """"`result`: the ChatMessageTool the model will receive. Long output is truncated to the tool loop's
    `max_output` before this message is built."""
    seen: list = []
    result, _ = await run(dispatcher, calls(("text_of_size", {"n": 5000})), max_output=100, review=[policy(seen=seen)])
    reviewed = seen[0]["result"]
    assert reviewed.model_dump() == result.messages[0].model_dump()
    assert "was too long to be displayed" in reviewed.text and len(reviewed.text.encode()) < 400


async def test_s23d_output_is_the_untruncated_return_value_also_from_a_remote_worker(dispatcher) -> None:
    """"`output`: the tool's untruncated return value, so evidence cut from the model's view is still visible
    to the reviewer." Checked with a 200 KB result (well over the 16 KiB default truncation) over every
    dispatcher: the untruncated value travels back on the wire."""
    seen: list = []
    tail = "EVIDENCE-AT-THE-END"
    specs = calls(("text_of_size", {"n": 200_000}), ("text_of_size", {"n": 1, "char": tail}))
    # A reviewer that needs the evidence the model cannot see.
    result, _ = await run(dispatcher, specs, review=[policy(seen=seen)])
    big = next(s for s in seen if s["call"].id == "c0")
    assert big["output"] == "x" * 200_000
    assert len(result.messages[0].text) < 20_000 and "too long" in result.messages[0].text


async def test_s23e_view_is_the_tools_human_readable_rendering(dispatcher) -> None:
    """"`view`: the tool's optional human-readable rendering of the call."""
    seen: list = []
    await run(dispatcher, calls(("shell", {"command": "ls -la", "cwd": "data"}), ("add", {"x": 1, "y": 1})),
              review=[policy(seen=seen)])
    views = {s["call"].id: s["view"] for s in seen}
    assert views["c0"].context.content == "working directory: /srv/data"
    assert views["c0"].call.content == "```bash\nls -la\n```"
    assert views["c1"].context is None and views["c1"].call is None  # no viewer: an empty view


async def test_s23f_history_is_the_conversation_up_to_and_including_the_assistant_message(dispatcher) -> None:
    """"`history`: the conversation up to and including the assistant message that issued the call."""
    seen: list = []
    await run(dispatcher, calls(("add", {"x": 1, "y": 1})), text="adding", review=[policy(seen=seen)])
    history = seen[0]["history"]
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[-1].text == "adding" and history[-1].tool_calls[0].id == "c0"


async def test_s24_a_reviewer_exception_ends_the_sample_with_an_error(dispatcher, tmp_path) -> None:
    """"An exception raised by a reviewer ends the sample with an error, as an approver's exception does."""

    async def broken(message, call, result, output, view, history) -> Review:
        raise RuntimeError("reviewer broke")

    async def broken_approver(message, call, view, history) -> Approval:
        raise RuntimeError("approver broke")

    marker = tmp_path / "late"
    specs = calls(("add", {"x": 1, "y": 1}), ("sleeper", {"seconds": 1.0, "marker": str(marker)}))
    transcript = Transcript()
    with pytest.raises(RuntimeError, match="reviewer broke"):
        await run(dispatcher, specs, review=[ReviewPolicy(broken, tools="add")], transcript=transcript)
    with pytest.raises(RuntimeError, match="approver broke"):
        await run(dispatcher, specs, approval=[ApprovalPolicy(broken_approver, "*")])
    assert transcript.find(ReviewEvent) == []
    kinds = {e.id: e.error.type if e.error else None for e in transcript.find(ToolEvent)}
    assert kinds == {"c0": None, "c1": "cancelled"}


async def test_s25_a_reviewers_own_model_calls_do_not_count_toward_sample_limits(dispatcher) -> None:
    """"Model calls a reviewer makes itself do not count toward the sample's token or turn limits."""
    usage = ModelUsage(input_tokens=400, output_tokens=100, total_tokens=500)

    def judge() -> Any:
        return get_model("scripted",
                         outputs=[ModelOutput.from_content("judge", "fine").model_copy(update={"usage": usage})] * 5)

    @reviewer(name="model_judge")
    def model_judge() -> Any:
        model = judge()

        async def review(message, call, result, output, view, history) -> Review:
            verdict = await model.generate(f"Is this fine? {output}")
            record_turn()  # what an agent loop does each turn: the reviewer's turns are its own
            return Review(decision="continue", explanation=verdict.completion)

        return review

    transcript = Transcript()
    with (bind_transcript(transcript), usage_scope("sample") as sample, token_limit(100) as tokens,
          turn_limit(0) as turns):
        await run(dispatcher, calls(("add", {"x": 1, "y": 1})), review=[ReviewPolicy(model_judge())],
                  transcript=transcript)
        check_limits()  # nothing breached
        assert (tokens.usage, turns.usage) == (0, 0)
        assert sample.total_tokens == 500  # still reported in the sample's usage, as a child figure
        # Control: the same call made by the sample itself is charged (and, as in Inspect, the model
        # call that crosses the limit raises once its usage is recorded).
        with pytest.raises(LimitExceededError):
            await judge().generate("sample's own call")
        assert tokens.usage == 500
        with pytest.raises(LimitExceededError):
            check_limits()
    assert reviews(transcript) == [("model_judge", "c0", "continue")]


# -- cancellation ----------------------------------------------------------------------------------


async def test_s26_cancelling_a_call_while_its_review_is_pending_stops_the_sample_as_an_operator_limit(
    dispatcher) -> None:
    """"Cancelling a tool call before its review has finished stops the sample with an operator limit. The
    completed tool result stays in the record, with an info event recording that the review was cancelled."""
    transcript = Transcript()
    task = asyncio.ensure_future(run(dispatcher, calls(("add", {"x": 3, "y": 4})),
                                     review=[ReviewPolicy(blocking_review())],
                                     transcript=transcript))
    await until_pending("c0")
    # The operator cancels from another thread (a UI would); the cancel is thread-safe.
    assert await asyncio.to_thread(cancel_review, "c0", None, "operator pressed cancel")
    with pytest.raises(TerminateSampleError, match="cancelled while its review was pending"):
        await asyncio.wait_for(task, 10)
    [event] = transcript.find(ToolEvent)
    assert event.id == "c0" and event.result == "7"
    [info] = [e for e in transcript.find(InfoEvent) if e.source == "review"]
    assert info.data["call_id"] == "c0" and info.data["cancelled_by"] == "operator"
    assert "operator pressed cancel" in info.data["message"]
    assert transcript.events.index(info) > transcript.events.index(event)
    assert pending_reviews() == [] and not cancel_review("c0")


async def test_s27a_when_a_sibling_fails_pending_reviews_are_cancelled_and_results_kept(dispatcher) -> None:
    """"If the sample stops for another reason, unfinished reviewers are cancelled, and their tools'
    completed results are kept as well." Here: a parallel sibling's fatal error."""
    transcript = Transcript()
    specs = calls(("add", {"x": 3, "y": 4}), ("fail", {"kind": "fatal", "delay": 0.3}))
    with pytest.raises(ToolExecutionFatal, match="boom"):
        await run(dispatcher, specs, review=[ReviewPolicy(blocking_review(), tools="add")], transcript=transcript)
    events = {e.id: e for e in transcript.find(ToolEvent)}
    assert events["c0"].result == "7" and events["c0"].error is None
    assert events["c1"].failed
    [info] = [e for e in transcript.find(InfoEvent) if e.source == "review"]
    assert info.data["cancelled_by"] == "sample_stopped"
    assert transcript.find(ReviewEvent) == [] and pending_reviews() == []


async def test_s27b_a_time_limit_cancels_pending_reviews_and_keeps_results(dispatcher) -> None:
    """"If the sample stops for another reason, unfinished reviewers are cancelled ..." Here: the sample's
    time limit fires while a (human-like) review is pending."""
    transcript = Transcript()
    with pytest.raises(LimitExceededError) as limit, time_limit(0.5):
        await run(dispatcher, calls(("add", {"x": 1, "y": 1}), ("text_of_size", {"n": 3})),
                  review=[ReviewPolicy(blocking_review())], transcript=transcript)
    assert limit.value.type == "time"
    assert sorted((e.id, e.result) for e in transcript.find(ToolEvent)) == [("c0", "2"), ("c1", "xxx")]
    infos = [e for e in transcript.find(InfoEvent) if e.source == "review"]
    assert sorted(i.data["call_id"] for i in infos) == ["c0", "c1"]
    assert transcript.find(ReviewEvent) == [] and pending_reviews() == []


async def test_s28_an_interrupted_review_records_no_decision(dispatcher) -> None:
    """"An interrupted review records no review decision." Another reviewer that escalated before the
    interruption keeps its event; the interrupted one adds none."""
    transcript = Transcript()
    task = asyncio.ensure_future(run(dispatcher, calls(("add", {"x": 1, "y": 1})),
                                     review=[policy("escalate"), ReviewPolicy(blocking_review())],
                                     transcript=transcript))
    await until_pending("c0")
    await asyncio.sleep(0.05)  # let the escalating reviewer's decision land first
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reviews(transcript) == [("scripted_review", "c0", "escalate")]
    assert [e.data["cancelled_by"] for e in transcript.find(InfoEvent) if e.source == "review"] == ["sample_stopped"]


# -- policies ----------------------------------------------------------------------------------------


@reviewer(name="egress_guard")
def _my_network_factory() -> Any:
    """Registered as ``egress_guard``: YAML refers to it by that name, not by the function's."""

    async def review(message, call, result, output, view, history) -> Review:
        return Review(decision="terminate" if "HTTP/1.1" in str(output) else "continue", explanation="egress checked")

    return review


async def test_s29_s30_yaml_policies_reference_reviewers_by_registered_name(dispatcher, tmp_path) -> None:
    """"Policies can be written in YAML and passed with --review." / "Reviewers written in your own Python
    modules are referenced by their registered name; the @reviewer(name=...) decorator controls that name."""
    path = tmp_path / "review.yaml"
    path.write_text("reviewers:\n  - name: egress_guard\n    tools: [\"curl\", \"shell\"]\n"
                    "  - name: scripted_review\n    tools: \"*\"\n    decision: continue\n    explanation: fine\n")
    loaded = review_policy_from_file(path)
    assert [p.tools for p in loaded] == [["curl", "shell"], "*"]
    with pytest.raises(TerminateSampleError, match="egress checked"):
        await run(dispatcher, calls(("curl", {"url": "http://x"})), review=loaded)
    _, transcript = await run(dispatcher, calls(("shell", {"command": "ls"}), ("add", {"x": 1, "y": 1})), review=loaded)
    assert sorted((e.reviewer, e.call.id, e.explanation) for e in transcript.find(ReviewEvent)) == [
        ("egress_guard", "c0", "egress checked"), ("scripted_review", "c1", "fine")]
    from orchestrator.review import review_policy_from_config

    with pytest.raises(ValueError, match="Unknown reviewer '_my_network_factory'"):
        review_policy_from_config({"reviewers": [{"name": "_my_network_factory"}]})
    with pytest.raises(ValueError, match="Unknown reviewer 'nobody'"):
        review_policy_from_config({"reviewers": [{"name": "nobody"}]})


async def test_s31_tools_use_the_approval_glob_syntax_names_and_arguments(dispatcher) -> None:
    """"The tools field uses the same glob syntax as approval policies and can match a tool name, or a tool
    name together with its arguments."""
    seen: list = []
    review = [policy("terminate", tools=["shell(command='rm *')"], seen=seen), policy("continue", tools="sh*")]
    _result, transcript = await run(dispatcher, calls(("shell", {"command": "ls /"})), review=review)
    assert seen == [] and reviews(transcript) == [("scripted_review", "c0", "continue")]
    with pytest.raises(TerminateSampleError):
        await run(dispatcher, calls(("shell", {"command": "rm -rf /"})), review=review)
    with pytest.raises(ValueError, match="Invalid tool pattern"):
        ReviewPolicy(rt.scripted_review(), tools="shell(command)")


async def test_s32_python_policies_are_lists_of_review_policy_objects(dispatcher) -> None:
    """"In Python, pass a list of ReviewPolicy objects." (``resolve_review`` is what eval/--review use.)"""
    review = [ReviewPolicy(rt.no_network(), tools=["curl", "shell"])]
    assert resolve_review(review) is review
    [human] = resolve_review("human")
    assert human.tools == "*" and human.reviewer.__toolfleet_reviewer__ == "human"
    with pytest.raises(TerminateSampleError):
        await run(dispatcher, calls(("curl", {"url": "http://x"})), review=resolve_review(review))


async def test_s35_s36_execute_tools_review_replaces_the_policy_and_restores_it(dispatcher) -> None:
    """"execute_tools() ... accept a review argument and apply the policy during tool execution." /
    "These policies replace eval- and task-level reviewers during execution and restore the previous policy
    when it ends. The replacement is total: tools the agent's own policy does not cover are not reviewed,
    even if the eval-level policy covers them."""
    outer = [policy("terminate", tools="*")]
    inner = [policy("continue", tools="add")]
    with review_policy_scope(outer):
        result, transcript = await run(dispatcher, calls(("add", {"x": 1, "y": 1}), ("curl", {"url": "http://x"})),
                                       review=inner)
        assert active_review_policy() is outer  # restored
        # Without the replacement the outer (eval/task-level) policy applies.
        with pytest.raises(TerminateSampleError):
            await run(dispatcher, calls(("add", {"x": 1, "y": 1})))
    assert [m.error for m in result.messages] == [None, None]
    assert reviews(transcript) == [("scripted_review", "c0", "continue")]  # curl: not reviewed at all


# -- the record ------------------------------------------------------------------------------------


async def test_s39_review_event_follows_the_tool_event_and_the_tools_own_events(dispatcher) -> None:
    """"Each decision is recorded as a ReviewEvent after the tool call completes, placed after the ToolEvent
    of the call it reviewed and after any events the tool itself emitted. The event records the reviewer's
    name, the call, the decision and the reviewer's explanation; the result and the call's view are on the
    ToolEvent with the same call id."""
    result, transcript = await run(dispatcher, calls(("chatty", {"n": 3}), ("chatty", {"n": 2}),
                                                     ("add", {"x": 1, "y": 1})),
                                   review=[policy("escalate", explanation="unsure"),
                                           policy("continue", explanation="ok")])
    events = transcript.events
    for call_id in ("c0", "c1", "c2"):
        tool_event = next(e for e in events if isinstance(e, ToolEvent) and e.id == call_id)
        decisions = [e for e in events if isinstance(e, ReviewEvent) and e.call.id == call_id]
        assert [(d.reviewer, d.decision, d.explanation) for d in decisions] == [
            ("scripted_review", "escalate", "unsure"), ("scripted_review", "continue", "ok")]
        assert all(events.index(d) > events.index(tool_event) for d in decisions)
        assert tool_event.result == next(m for m in result.messages if m.tool_call_id == call_id).content
        assert decisions[0].call.function == tool_event.function and decisions[0].call.arguments == tool_event.arguments
    # The tool's own events (chatty's progress) all precede its review decisions.
    for call_id, n in (("c0", 3), ("c1", 2)):
        first_decision = next(i for i, e in enumerate(events) if isinstance(e, ReviewEvent) and e.call.id == call_id)
        own = [i for i, e in enumerate(events) if isinstance(e, InfoEvent) and e.source == "chatty"
               and e.data.startswith("chatty progress") and i < first_decision]
        assert len(own) >= n
    assert len([e for e in events if isinstance(e, InfoEvent) and e.source == "chatty"]) == 5


async def test_parallel_reviews_run_concurrently(dispatcher) -> None:
    """Reviews of parallel calls do not queue behind each other: a slow review of one call does not delay
    another call's review (nor its termination)."""
    release = asyncio.Event()
    review = [ReviewPolicy(blocking_review(release), tools="add"), policy("terminate", tools="text_of_size")]
    transcript = Transcript()
    with pytest.raises(TerminateSampleError):
        await asyncio.wait_for(run(dispatcher, calls(("add", {"x": 1, "y": 1}), ("text_of_size", {"n": 2})),
                                   review=review, transcript=transcript), 10)
    assert not release.is_set()  # terminated while the add review was still blocked
    assert [e.data["call_id"] for e in transcript.find(InfoEvent) if e.source == "review"] == ["c0"]


async def test_s26b_cancelling_one_of_several_parallel_calls_under_review(dispatcher) -> None:
    """The cancellation sentence for a parallel stage: cancelling one call under review stops the sample as an
    operator limit; the sibling's pending review is cancelled too (the sample stopped); both results are kept."""
    transcript = Transcript()
    task = asyncio.ensure_future(run(dispatcher, calls(("add", {"x": 1, "y": 1}), ("add", {"x": 2, "y": 2})),
                                     review=[ReviewPolicy(blocking_review())], transcript=transcript))
    await until_pending("c0")
    await until_pending("c1")
    assert cancel_review("c1")
    with pytest.raises(TerminateSampleError, match=r"add \(c1\) was cancelled while its review was pending"):
        await asyncio.wait_for(task, 10)
    assert sorted((e.id, e.result) for e in transcript.find(ToolEvent)) == [("c0", "2"), ("c1", "4")]
    causes = {e.data["call_id"]: e.data["cancelled_by"] for e in transcript.find(InfoEvent) if e.source == "review"}
    assert causes == {"c1": "operator", "c0": "sample_stopped"}
    assert transcript.find(ReviewEvent) == [] and pending_reviews() == []


async def test_s26c_a_late_cancel_of_a_finished_review_is_ignored(dispatcher) -> None:
    """Cancelling after the review decided does not touch whatever the sample does next."""
    release = asyncio.Event()
    task = asyncio.ensure_future(run(dispatcher, calls(("add", {"x": 1, "y": 1})),
                                     review=[ReviewPolicy(blocking_review(release))]))
    await until_pending("c0")
    [handle] = [p for p in pending_reviews() if p.call.id == "c0"]
    release.set()
    result, transcript = await asyncio.wait_for(task, 10)
    handle.cancel("too late")  # the review is done: a no-op
    await asyncio.sleep(0)
    assert [m.text for m in result.messages] == ["2"] and not handle.cancelled_by_operator
    assert reviews(transcript) == [("blocking_review", "c0", "continue")]
