"""Datasets from JSON, JSONL and CSV files (mirrors ``inspect_ai.dataset.json_dataset`` / ``csv_dataset``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ._sample import FieldSpec, MemoryDataset, RecordToSample, samples_from_records


def _read_text(path: Path) -> str:
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes()).decode("utf-8")
    return path.read_text(encoding="utf-8")


def _stem(path: Path) -> str:
    return Path(path.stem).stem if path.suffix == ".gz" else path.stem


def _is_jsonl(path: Path, text: str) -> bool:
    suffixes = [s for s in path.suffixes if s != ".gz"]
    if suffixes and suffixes[-1] == ".jsonl":
        return True
    return not text.lstrip().startswith("[")


def json_dataset(json_file: str | Path, sample_fields: FieldSpec | RecordToSample | None = None,
                 auto_id: bool = False, shuffle: bool = False, seed: int | None = None, limit: int | None = None,
                 name: str | None = None) -> MemoryDataset:
    """Samples from a JSON array file or a JSON Lines file (``.jsonl``; gzip allowed)."""
    path = Path(json_file)
    text = _read_text(path)
    records: list[dict[str, Any]]
    if _is_jsonl(path, text):
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
    else:
        records = json.loads(text)
        if not isinstance(records, list):
            raise ValueError(f"{path}: a JSON dataset must be an array of objects")
    return _dataset(records, sample_fields, auto_id, shuffle, seed, limit, name or _stem(path), str(path))


def csv_dataset(csv_file: str | Path, sample_fields: FieldSpec | RecordToSample | None = None,
                auto_id: bool = False, shuffle: bool = False, seed: int | None = None, limit: int | None = None,
                name: str | None = None, delimiter: str = ",") -> MemoryDataset:
    """Samples from a CSV file with a header row."""
    path = Path(csv_file)
    records = list(csv.DictReader(io.StringIO(_read_text(path)), delimiter=delimiter))
    return _dataset(records, sample_fields, auto_id, shuffle, seed, limit, name or _stem(path), str(path))


def _dataset(records: list[dict[str, Any]], sample_fields: FieldSpec | RecordToSample | None, auto_id: bool,
             shuffle: bool, seed: int | None, limit: int | None, name: str, location: str) -> MemoryDataset:
    dataset = MemoryDataset(samples_from_records(records, sample_fields, auto_id), name=name, location=location)
    if shuffle:
        dataset.shuffle(seed)
    return dataset[:limit] if limit is not None else dataset
