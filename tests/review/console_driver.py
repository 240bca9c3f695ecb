"""A small program that asks a human (on its own terminal) to approve or review tool calls.

The console tests spawn it on a real pseudo-terminal with ``pexpect`` and answer its prompts.

    python console_driver.py review [--choices continue,terminate,escalate] [--yaml FILE] [--calls N]
    python console_driver.py approve [--choices approve,reject,terminate]

It runs one ``execute_tools`` turn per ``--rounds`` and prints ``OUTCOME ...`` lines. On SIGUSR1 it
cancels every pending review (what an operator's "cancel this call" does).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.approval import ApprovalPolicy, NoTerminalError, human_approver
from orchestrator.log import ApprovalEvent, ReviewEvent, Transcript, bind_transcript
from orchestrator.model import ChatMessage, ChatMessageAssistant, ChatMessageTool, ChatMessageUser, execute_tools
from orchestrator.review import ReviewPolicy, human_reviewer, pending_reviews, review_policy_from_file
from orchestrator.tool import ToolCall
from orchestrator.util import TerminateSampleError
from tests.review import review_tools as rt  # registers output_monitor etc.

COMMANDS = ["ls -la", "cat SUSPICIOUS.txt", "echo hi"]


def _cancel_all() -> None:
    for pending in pending_reviews():
        pending.cancel("operator cancelled from the console")


async def one_round(args: argparse.Namespace, index: int) -> None:
    choices = args.choices.split(",") if args.choices else None
    commands = [args.command, *COMMANDS[1:]] if args.command else COMMANDS
    tool_calls = [ToolCall(id=f"r{index}c{i}", function="shell", arguments={"command": commands[i], "cwd": "data"})
                  for i in range(args.calls)]
    messages: list[ChatMessage] = [ChatMessageUser(content="go"),
                                   ChatMessageAssistant(content="Running the command.", tool_calls=tool_calls)]
    kwargs: dict = {}
    if args.mode == "review":
        kwargs["review"] = review_policy_from_file(args.yaml) if args.yaml else [ReviewPolicy(human_reviewer(choices))]
    else:
        kwargs["approval"] = [ApprovalPolicy(human_approver(choices))]
    transcript = Transcript()
    try:
        with bind_transcript(transcript):
            result = await execute_tools(messages, [rt.shell()], max_output=args.max_output, **kwargs)
        for m in result.messages:
            assert isinstance(m, ChatMessageTool)
            print(f"OUTCOME result {m.tool_call_id}: {m.error.type + ': ' + m.error.message if m.error else m.text}",
                  flush=True)
    except TerminateSampleError as exc:
        print(f"OUTCOME terminated: {exc.reason}", flush=True)
    except NoTerminalError as exc:
        print(f"OUTCOME no-terminal: {exc}", flush=True)
        raise SystemExit(3) from None
    for e in transcript.find(ReviewEvent):
        print(f"EVENT review {e.call.id} {e.reviewer} {e.decision} {e.explanation}", flush=True)
    for e in transcript.find(ApprovalEvent):
        print(f"EVENT approval {e.call.id} {e.approver} {e.decision} {e.explanation}", flush=True)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["review", "approve"])
    p.add_argument("--choices")
    p.add_argument("--yaml")
    p.add_argument("--calls", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--max-output", type=int, default=None)
    p.add_argument("--command", help="the first call's command (e.g. one printing terminal control sequences)")
    args = p.parse_args()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _cancel_all)
    for index in range(args.rounds):
        await one_round(args, index)
    print("DRIVER DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
