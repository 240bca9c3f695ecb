"""Text scorers: ``includes`` and ``match``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from ._score import CORRECT, INCORRECT, Score, Scorer, accuracy, scorer, stderr
from ._target import Target

if TYPE_CHECKING:
    from orchestrator.solver._task_state import TaskState


@scorer(metrics=[accuracy(), stderr()])
def includes(ignore_case: bool = True) -> Scorer:
    """Correct when any target appears in the model's final answer."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion
        haystack = answer.lower() if ignore_case else answer
        hit = any((t.lower() if ignore_case else t) in haystack for t in target)
        return Score(value=CORRECT if hit else INCORRECT, answer=answer)

    return score


_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def _normalise_number(text: str) -> str:
    text = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else str(value)


@scorer(metrics=[accuracy(), stderr()])
def match(location: Literal["begin", "end", "any", "exact"] = "end", ignore_case: bool = True,
          numeric: bool = False) -> Scorer:
    """Correct when a target matches the beginning/end of the answer, anywhere in it, or all of it."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion.strip()
        candidate = answer
        if numeric:
            numbers = _NUMBER.findall(answer)
            candidate = "" if not numbers else numbers[0] if location == "begin" else numbers[-1]
            candidate = _normalise_number(candidate)
        norm = (lambda s: s.lower()) if ignore_case else (lambda s: s)
        for t in target:
            want = _normalise_number(t) if numeric else t.strip()
            a, w = norm(candidate), norm(want)
            if numeric or location == "exact":
                ok = a == w
            elif location == "begin":
                ok = a.startswith(w)
            elif location == "end":
                ok = a.endswith(w)
            else:
                ok = w in a
            if ok:
                return Score(value=CORRECT, answer=candidate)
        return Score(value=INCORRECT, answer=candidate)

    return score
