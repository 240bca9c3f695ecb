"""Compatibility: the sandbox tools moved to the shared tool layer (``orchestrator.tool._tools``)."""

from orchestrator.tool._tools import bash, bash_session, python, text_editor

__all__ = ["bash", "bash_session", "python", "text_editor"]
