"""``Sample`` and ``Dataset`` (mirrors ``inspect_ai.dataset``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.model._chat_message import ChatMessage


class Sample(BaseModel):
    """One unit of an eval: an input, the target(s) a scorer compares against, and sandbox contents."""

    model_config = ConfigDict(extra="forbid")

    input: str | list[ChatMessage]
    target: str | list[str] = ""
    id: int | str | None = None
    metadata: dict[str, Any] | None = None
    choices: list[str] | None = None
    # Per-sample override of the task's sandbox config; ("docker", "compose.yaml"): a compose file
    # relative to the task file (Inspect's form).
    sandbox: str | dict[str, Any] | tuple[str, str | dict[str, Any]] | None = None
    files: dict[str, str | bytes | Path] | None = None
    """Path in the sandbox -> inline text, bytes, a local file or directory path, or a ``data:`` URI; put in
    the sandbox (one archive) before ``setup`` runs. See ``orchestrator.dataset._files`` for the rules."""
    setup: str | None = None
    """A shell script run once (``sh -c``) in the sandbox after the files are in place, before the solver:
    as the sandbox's default user, in its working directory, within 600 s; a non-zero exit or a timeout
    destroys the sandbox and fails the sample (an error, retried under ``--retry-on-error``)."""

    def __init__(self, input: str | list[ChatMessage], target: str | list[str] = "", id: int | str | None = None,
                 **kwargs: Any) -> None:
        # Positional (input, target, id) like Inspect's constructor.
        super().__init__(input=input, target=target, id=id, **kwargs)

    @field_validator("sandbox", mode="before")
    @classmethod
    def _typed_sandbox_as_dict(cls, value: Any) -> Any:
        # A typed spec (``workers.sandbox.DockerSandboxConfig`` etc., as a Task takes) is kept as its JSON form;
        # a snapshot as the spec of a sandbox opened from it (a checkpoint).
        from orchestrator.util._snapshot import Snapshot

        if isinstance(value, Snapshot):
            return value.sandbox_config()
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


class Dataset(Sequence[Sample]):
    """An ordered, indexable collection of samples with a name and where it came from."""

    def __init__(self, samples: Sequence[Sample], name: str | None = None, location: str | None = None,
                 shuffled: bool = False) -> None:
        self.samples = list(samples)
        self.name = name
        self.location = location
        self.shuffled = shuffled

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> Self: ...

    def __getitem__(self, index: int | slice) -> Sample | Self:
        if isinstance(index, slice):
            return type(self)(self.samples[index], self.name, self.location, self.shuffled)
        return self.samples[index]

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def shuffle(self, seed: int | None = None) -> None:
        random.Random(seed).shuffle(self.samples)  # noqa: S311 - a reproducible order, no secret
        self.shuffled = True

    def filter(self, predicate: Callable[[Sample], bool], name: str | None = None) -> Dataset:
        return type(self)([s for s in self.samples if predicate(s)], name or self.name, self.location, self.shuffled)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, samples={len(self.samples)})"


class MemoryDataset(Dataset):
    """A dataset held in memory (built from a list)."""


class FieldSpec(BaseModel):
    """Which record fields become which ``Sample`` fields (the rest can go to metadata)."""

    input: str = "input"
    target: str = "target"
    id: str = "id"
    choices: str = "choices"
    files: str = "files"
    setup: str = "setup"
    sandbox: str = "sandbox"
    metadata: list[str] | None = Field(None, description="fields copied into metadata; None: all unmapped fields")


RecordToSample = Callable[[dict[str, Any]], "Sample | list[Sample]"]


def record_to_sample_fn(sample_fields: FieldSpec | RecordToSample | None) -> RecordToSample:
    """A record → sample function from a ``FieldSpec`` (or the user's own function)."""
    if callable(sample_fields):
        return sample_fields
    spec = sample_fields or FieldSpec()
    mapped = {spec.input, spec.target, spec.id, spec.choices, spec.files, spec.setup, spec.sandbox}

    def convert(record: dict[str, Any]) -> Sample:
        if spec.input not in record:
            raise ValueError(f"Record has no '{spec.input}' field (fields: {', '.join(record)})")
        if spec.metadata is None:
            metadata = {k: v for k, v in record.items() if k not in mapped}
        else:
            metadata = {k: record[k] for k in spec.metadata if k in record}
        target = record.get(spec.target, "")
        return Sample(
            input=record[spec.input],
            target=target if isinstance(target, list) else ("" if target is None else str(target)),
            id=record.get(spec.id),
            choices=record.get(spec.choices),
            files=record.get(spec.files),
            setup=record.get(spec.setup),
            sandbox=record.get(spec.sandbox),
            metadata=metadata or None,
        )

    return convert


def samples_from_records(records: Sequence[dict[str, Any]], sample_fields: FieldSpec | RecordToSample | None,
                         auto_id: bool = False) -> list[Sample]:
    convert = record_to_sample_fn(sample_fields)
    samples: list[Sample] = []
    for record in records:
        produced = convert(record)
        samples.extend(produced if isinstance(produced, list) else [produced])
    if auto_id:
        for i, sample in enumerate(samples):
            if sample.id is None:
                sample.id = i + 1
    return samples
