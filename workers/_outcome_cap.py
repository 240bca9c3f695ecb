"""Cut a call's outcome to the worker's size cap before it is cached or stored (pure; table-tested).

The model sees a middle-truncated 16 KiB of a tool's output by default (``max_tool_output``); the
orchestrator's reviewers and log see the outcome as the worker sent it. The worker keeps at most
``max_outcome_bytes`` (512 KiB by default, ``toolfleet worker --max-outcome-bytes``) so that a call
printing gigabytes costs the fleet (worker call memory, Redis, the orchestrator) at most that much.

Text is cut in the middle, as the orchestrator does for the model (the first and last halves stay,
so the model's own head/tail view is unchanged), with one marker line saying how much the worker
left out. Images past the budget are replaced with a text note. Error and fatal messages are bounded
too (a tool can raise with any message).
"""

from __future__ import annotations

from typing import Any

from orchestrator._wire import CallOutcome
from orchestrator.tool._content import ContentImage, ContentText

__all__ = ["cap_outcome", "cut_middle"]

MESSAGE_CAP = 64 * 1024  # error / fatal messages and tracebacks


def _format(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def cut_middle(text: str, cap: int) -> str:
    """``text`` if its UTF-8 size fits ``cap``; else its first and last halves around a marker line."""
    if len(text) <= cap // 4 or (text.isascii() and len(text) <= cap):
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return text
    marker = f"\n[... {_format(len(data) - cap)} omitted by the toolfleet worker (outcome cap {_format(cap)}) ...]\n"
    keep = max(0, cap - len(marker))
    head = data[: keep // 2].decode("utf-8", "ignore")
    tail = data[len(data) - (keep - keep // 2):].decode("utf-8", "ignore")
    return head + marker + tail


def _item_size(item: Any) -> int:
    if isinstance(item, str):
        return len(item)  # an upper bound in characters is enough to decide; cut_middle measures bytes
    if isinstance(item, ContentText):
        return len(item.text)
    if isinstance(item, ContentImage):
        return len(item.image)
    return 0


def _cap_result(result: Any, cap: int) -> Any:
    if isinstance(result, str):
        return cut_middle(result, cap)
    if isinstance(result, ContentText):
        return result.model_copy(update={"text": cut_middle(result.text, cap)})
    if isinstance(result, ContentImage):
        return result if len(result.image) <= cap else ContentText(text=f"[image of {_format(len(result.image))} "
                                                                   "omitted by the toolfleet worker (outcome cap "
                                                                   f"{_format(cap)})]")
    if isinstance(result, list):
        budget, items = cap, []
        for item in result:
            size = _item_size(item)
            if size <= budget:
                items.append(item)
                budget -= size
            elif isinstance(item, ContentImage) or budget < 256:
                items.append(
                    ContentText(text=f"[{_format(size)} omitted by the toolfleet worker (outcome cap {_format(cap)})]"))
            else:
                items.append(_cap_result(item, budget))
                budget = 0
        return items
    return result


def cap_outcome(outcome: CallOutcome, cap: int) -> CallOutcome:
    """The outcome with its result cut to ``cap`` bytes and its messages to ``MESSAGE_CAP``."""
    update: dict[str, Any] = {}
    capped = _cap_result(outcome.result, cap)
    if capped is not outcome.result:
        update["result"] = capped
    if outcome.error is not None and len(outcome.error.message) > MESSAGE_CAP:
        update["error"] = outcome.error.model_copy(update={"message": cut_middle(outcome.error.message, MESSAGE_CAP)})
    fatal = outcome.fatal
    if fatal is not None and (len(fatal.message) > MESSAGE_CAP or len(fatal.traceback or "") > MESSAGE_CAP):
        update["fatal"] = fatal.model_copy(update={"message": cut_middle(fatal.message, MESSAGE_CAP),
                                                   "traceback": cut_middle(fatal.traceback or "", MESSAGE_CAP) or None})
    return outcome.model_copy(update=update) if update else outcome
