"""toolfleet's orchestrator: agents, models, stage planning, policies and evals.

This top-level module is deliberately empty: workers import the shared definition layer
(`orchestrator.tool`, `orchestrator.util`, `orchestrator._wire`) without loading the thinking layer.
"""

__version__ = "0.1.0"
