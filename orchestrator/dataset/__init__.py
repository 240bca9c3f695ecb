"""Samples and datasets (mirrors ``inspect_ai.dataset``)."""

from ._files import (
    SampleFilesError,
    pack_sample_files,
    resolve_dataset_files,
    resolve_sample_files,
    sample_files_limit,
    sandbox_files_wire,
)
from ._harbor import HarborTaskError, harbor_dataset, load_harbor
from ._sample import Dataset, FieldSpec, MemoryDataset, RecordToSample, Sample
from ._sources import csv_dataset, json_dataset

__all__ = ["Dataset", "FieldSpec", "HarborTaskError", "MemoryDataset", "RecordToSample", "Sample", "SampleFilesError",
           "csv_dataset",
           "harbor_dataset", "json_dataset", "load_harbor", "pack_sample_files", "resolve_dataset_files",
           "resolve_sample_files", "sample_files_limit",
           "sandbox_files_wire"]
