"""The stand-ins' fixtures: a test internet and a local registry, each started once per module."""

from tests.support.internet import local_internet  # noqa: F401  (fixture)
from tests.support.registry import local_registry  # noqa: F401  (fixture)
