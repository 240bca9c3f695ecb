"""Samples and datasets (mirrors ``inspect_ai.dataset``)."""

from ._sample import Dataset, FieldSpec, MemoryDataset, RecordToSample, Sample
from ._sources import csv_dataset, json_dataset

__all__ = ["Dataset", "FieldSpec", "MemoryDataset", "RecordToSample", "Sample", "csv_dataset", "json_dataset"]
