"""The sandbox tools: ``bash``, ``python`` (parallel), ``text_editor``, ``bash_session`` (serial).

They reach the current sample's sandbox with ``orchestrator.util.sandbox()`` and work on every
driver. ``orchestrator.tool`` re-exports them lazily (``workers.tools`` too, for compatibility).
"""

from ._bash_session import bash_session
from ._execute import bash, python
from ._text_editor import text_editor

__all__ = ["bash", "bash_session", "python", "text_editor"]
