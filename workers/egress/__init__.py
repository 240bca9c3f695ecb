"""Sandbox egress: the network policy of a sandbox (``none``, ``public``, ``allowlist``), enforced by
the worker's host.

``EgressEnforcer`` gives each sandbox a Docker network of its own, host rules that judge every packet
leaving it (``_nft.py``) and a DNS filter (``_dns.py``); ``_policy.py`` is the pure core that says
which addresses and names a policy reaches. docs/egress.md describes the boundary it keeps and what a
deployment must give the worker.
"""

from ._enforcer import EgressConfig, EgressEnforcer, SandboxNetwork
from ._errors import EgressError
from ._policy import (
           MODES,
           EgressMode,
           EgressPolicy,
           HostPattern,
           OperatorAllowance,
           classify,
           parse_allowance,
)

__all__ = ["MODES", "EgressConfig", "EgressEnforcer", "EgressError", "EgressMode", "EgressPolicy", "HostPattern",
           "OperatorAllowance", "SandboxNetwork", "classify", "parse_allowance"]
