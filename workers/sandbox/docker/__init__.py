"""The ``docker`` sandbox backend: hardened containers on the Docker Engine API, reached through an
in-container exec agent.

* ``_driver`` and ``_environment``: ``DockerSandboxDriver`` and its environments (one container, or a
  multi-service pod's other containers);
* ``_pool``: what a process's docker drivers share (``HostSandboxes``: capacity, warm pools, Engines,
  snapshots);
* ``_engine`` / ``_api``: one client, thread pool, host socket and reaper per Docker Engine;
* ``_exec`` / ``_direct``: the exec agent and the host socket it reaches the host through;
* ``_containers``, ``_pod``, ``_pull``, ``_disk``, ``_labels``, ``_snapshot``: containers, pods of
  services, images by pull policy, the writable-space cap, labels and the reaper, snapshots.
"""

from . import _labels as labels
from ._api import DockerAPI
from ._driver import DockerSandboxDriver
from ._environment import DockerSandboxEnvironment, DockerServiceEnvironment
from ._pool import HostSandboxes, host_sandboxes

__all__ = [
    "DockerAPI",
    "DockerSandboxDriver",
    "DockerSandboxEnvironment",
    "DockerServiceEnvironment",
    "HostSandboxes",
    "host_sandboxes",
    "labels",
]
