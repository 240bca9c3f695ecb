"""Backend configs: the tag picks the driver (table), every union member has its tag, no extras."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

import workers.sandbox as ws
from workers.sandbox import DockerSandboxConfig, LocalSandboxConfig, SandboxConfig, sandbox_config
from workers.sandbox._build import driver_class
from workers.sandbox.docker import DockerSandboxDriver
from workers.sandbox.local import LocalSandboxDriver


@pytest.mark.parametrize(
    ("value", "config_cls", "driver_cls"),
    [
        ("local", LocalSandboxConfig, LocalSandboxDriver),
        ("docker", DockerSandboxConfig, DockerSandboxDriver),
        ({"type": "local", "root_dir": "/tmp"}, LocalSandboxConfig, LocalSandboxDriver),
        ({"type": "docker", "image": "x:y", "pool_size": 0}, DockerSandboxConfig, DockerSandboxDriver),
        (LocalSandboxConfig(), LocalSandboxConfig, LocalSandboxDriver),
    ],
)
def test_config_maps_to_driver(value, config_cls, driver_cls):
    config = sandbox_config(value)
    assert type(config) is config_cls
    assert driver_class(config) is driver_cls


def test_every_union_member_has_its_tag():
    members = typing.get_args(typing.get_args(SandboxConfig)[0])
    tags = {m.model_fields["type"].default for m in members}
    assert tags == {"local", "docker"}
    for member in members:
        assert member().type == member.model_fields["type"].default


@pytest.mark.parametrize("value", [{"type": "docker", "imge": "typo"}, {"type": "nope"}, {"type": "local", "x": 1}])
def test_bad_configs_are_rejected(value):
    with pytest.raises(ValidationError):
        sandbox_config(value)


def test_hardening_defaults():
    c = DockerSandboxConfig()
    assert c.network_mode == "none" and not c.needs_network
    assert c.cap_drop is None  # ALL unless the sandbox runs as root where root is allowed (test_capabilities)
    assert "no-new-privileges" in c.security_opt
    assert c.init and c.pids_limit > 0 and c.mem_limit and c.cpus > 0
    assert c.memswap_limit is None  # means: same as mem_limit (no swap)


def test_pool_key_ignores_lifecycle_settings():
    a = DockerSandboxConfig(pool_size=1, max_sandboxes=3)
    b = DockerSandboxConfig(pool_size=5, ttl=10)
    assert a.limits_key() == b.limits_key()
    assert a.limits_key() != DockerSandboxConfig(mem_limit="2g").limits_key()


def test_exported_names():
    assert sorted(ws.__all__) == sorted(
        [
            "DEFAULT_IMAGE", "AgentSandboxEnvironment", "ChannelClosed", "CommandOutOfMemoryError",
            "DockerSandboxConfig", "ExecAgentLostError", "LocalSandboxConfig",
            "SandboxCapacityError", "SandboxConfig", "SandboxDriver", "SandboxImageError", "SandboxOutOfMemoryError",
            "SandboxRequest", "registry", "build_driver", "sandbox_config",
        ]
    )
    for name in ws.__all__:
        assert hasattr(ws, name)
    import orchestrator.tool as ot
    import workers.tools as wt

    assert sorted(wt.__all__) == ["bash", "bash_session", "python", "text_editor"]
    for name in wt.__all__:
        assert getattr(ot, name) is getattr(wt, name)
