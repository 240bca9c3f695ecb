"""Datasets from lists and files, text scorers, and the public names of the eval packages."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import orchestrator.dataset
import orchestrator.eval
import orchestrator.scorer
import orchestrator.solver
from orchestrator.dataset import FieldSpec, MemoryDataset, Sample, csv_dataset, json_dataset
from orchestrator.model import ModelOutput
from orchestrator.scorer import CORRECT, INCORRECT, Target, accuracy, includes, match, stderr
from orchestrator.scorer._score import Score
from orchestrator.solver import TaskState

RECORDS = [
    {"input": "2+2?", "target": "4", "id": "a", "topic": "math"},
    {"input": "capital of France?", "target": "Paris", "id": "b", "topic": "geo"},
]


def test_json_array_jsonl_and_gzip(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text(json.dumps(RECORDS))
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress((tmp_path / "d.jsonl").read_bytes()))
    for name in ("d.json", "d.jsonl", "d.jsonl.gz"):
        ds = json_dataset(tmp_path / name)
        assert [s.id for s in ds] == ["a", "b"]
        assert ds[0].input == "2+2?" and ds[0].target == "4" and ds[0].metadata == {"topic": "math"}
        assert ds.name == "d" and ds.location == str(tmp_path / name)


def test_csv_with_field_spec_limit_and_auto_id(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("question,answer,topic\n2+2?,4,math\ncapital?,Paris,geo\nsky?,blue,nature\n")
    ds = csv_dataset(path, FieldSpec(input="question", target="answer", metadata=["topic"]), auto_id=True, limit=2)
    assert [(s.id, s.input, s.target, s.metadata) for s in ds] == [
        (1, "2+2?", "4", {"topic": "math"}), (2, "capital?", "Paris", {"topic": "geo"})]


def test_record_function_and_bad_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"d.jsonl:2"):
        json_dataset(path)
    path.write_text(json.dumps(RECORDS[0]) + "\n")
    ds = json_dataset(path, lambda r: Sample(input=r["input"].upper(), target=[r["target"], "four"]))
    assert ds[0].input == "2+2?".upper() and ds[0].target == ["4", "four"]


def test_memory_dataset_slicing_filter_shuffle() -> None:
    ds = MemoryDataset([Sample(input=str(i), id=i) for i in range(10)], name="n")
    assert len(ds[2:5]) == 3 and isinstance(ds[2:5], MemoryDataset)
    assert [s.id for s in ds.filter(lambda s: s.id % 2 == 0)] == [0, 2, 4, 6, 8]
    ds.shuffle(seed=1)
    assert sorted(s.id for s in ds) == list(range(10)) and ds.shuffled


def _state(answer: str) -> TaskState:
    return TaskState(model="m", sample_id=1, epoch=1, input="q", messages=[],
                     output=ModelOutput.from_content("m", answer))


@pytest.mark.parametrize(
    ("scorer", "answer", "target", "expected"),
    [
        (includes(), "The capital is Paris.", "paris", CORRECT),
        (includes(ignore_case=False), "The capital is Paris.", "paris", INCORRECT),
        (includes(), "no idea", ["Paris", "Lyon"], INCORRECT),
        (match(), "so the answer is 42", "42", CORRECT),
        (match(location="begin"), "42 is it", "42", CORRECT),
        (match(location="exact"), "42 is it", "42", INCORRECT),
        (match(location="any"), "I think 42 is it", "42", CORRECT),
        (match(numeric=True), "total: $1,234.00", "1234", CORRECT),
        (match(numeric=True), "total: 1235", "1234", INCORRECT),
    ],
)
async def test_text_scorers(scorer, answer: str, target: str | list[str], expected: str) -> None:  # type: ignore[no-untyped-def]
    score = await scorer(_state(answer), Target(target))
    assert score.value == expected


def test_metrics() -> None:
    scores = [Score(value=v) for v in (CORRECT, INCORRECT, CORRECT, True)]
    assert accuracy()(scores) == 0.75
    assert round(stderr()(scores), 4) == 0.25


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (orchestrator.eval, {"Task", "task", "eval", "eval_async", "eval_retry", "read_eval_log", "EvalLog",
                             "EvalSample", "scripted_policy"}),
        (orchestrator.dataset, {"Sample", "Dataset", "MemoryDataset", "FieldSpec", "json_dataset", "csv_dataset"}),
        (orchestrator.scorer, {"Score", "Scorer", "Target", "scorer", "includes", "match", "sandbox_test", "accuracy",
                               "CORRECT", "INCORRECT"}),
        (orchestrator.solver, {"TaskState", "Solver", "Generate", "solver", "generate", "use_tools", "chain",
                               "system_message", "sample_state"}),
    ],
)
def test_exported_names(module, names: set[str]) -> None:  # type: ignore[no-untyped-def]
    assert names <= set(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), f"{module.__name__}.{name} is listed in __all__ but missing"
