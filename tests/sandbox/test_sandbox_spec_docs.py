"""The sandbox spec is one typed, documented model for a task and a sample."""

from __future__ import annotations

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.eval._preflight import PreflightError
from workers.sandbox import DockerSandboxConfig, LocalSandboxConfig


@pytest.mark.parametrize("model", [LocalSandboxConfig, DockerSandboxConfig])
def test_every_field_is_documented(model) -> None:  # type: ignore[no-untyped-def]
    undocumented = [name for name, field in model.model_fields.items() if not field.description]
    assert undocumented == []


def test_a_sample_takes_the_typed_spec_as_a_task_does() -> None:
    spec = DockerSandboxConfig(image="toolfleet/x:1", pool_size=0)
    sample = Sample(input="hi", sandbox=spec)
    assert sample.sandbox == spec.model_dump(mode="json")
    assert DockerSandboxConfig.model_validate(sample.sandbox) == spec
    assert Task(dataset=[sample], sandbox=LocalSandboxConfig()).sandbox == LocalSandboxConfig()


@pytest.mark.docker
async def test_a_typed_sample_spec_is_preflighted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sample = Sample(input="hi", id="a", sandbox=DockerSandboxConfig(image="toolfleet/x:1"))
    with pytest.raises(PreflightError, match=r"Docker image 'toolfleet/x:1' \(sample a\) is not on this machine"):
        await eval_async(Task(dataset=[sample]), "scripted", log_dir=tmp_path)
