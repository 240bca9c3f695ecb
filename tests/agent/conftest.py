"""Agent tests: a transcript and the parametrised dispatcher bound for every test."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from orchestrator.dispatch import reset_active_dispatcher, set_active_dispatcher  # noqa: E402
from orchestrator.log import Transcript, bind_transcript  # noqa: E402


@pytest.fixture
async def bound(dispatcher) -> AsyncIterator[Transcript]:
    """The active dispatcher and a fresh transcript, as a sample runner would bind them."""
    transcript = Transcript()
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript):
            yield transcript
    finally:
        reset_active_dispatcher(token)
