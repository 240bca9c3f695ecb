"""toolfleet's execution side: the call executor, sandbox drivers, sandbox tools and the Celery app.

Imports only the shared definition layer (``orchestrator.tool``, ``orchestrator.util``,
``orchestrator._wire``), never the orchestrator's thinking layer.
"""
