"""Fixtures of the egress tests (``_egress_fixtures``), for every module here that uses them."""

from tests.security._egress_fixtures import (  # noqa: F401  (fixtures)
    client,
    internet,
    listeners,
    metadata,
    published,
    upstream,
)
