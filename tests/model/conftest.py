"""Fixtures for model-layer tests: a real chat-completions server on loopback, fast retry policy."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests.support` lives beside the test packages; make the repo root importable however pytest is run.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from orchestrator.log import Transcript, bind_transcript  # noqa: E402 - after the sys.path line above
from orchestrator.model import RetryPolicy  # noqa: E402 - after the sys.path line above
from tests.support.anthropic_server import AnthropicServer  # noqa: E402 - after the sys.path line above
from tests.support.openai_server import OpenAIServer  # noqa: E402 - after the sys.path line above


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


@pytest.fixture
def fast_retry() -> RetryPolicy:
    # Real backoff schedule, shrunk so tests stay quick; max_elapsed still bounds every test.
    return RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.05, max_elapsed=10)


@pytest.fixture
def sample_transcript() -> Iterator[Transcript]:
    t = Transcript()
    with bind_transcript(t):
        yield t
