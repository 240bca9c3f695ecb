"""User-facing eval errors: each is a mistake in the input, shown by the CLI as one line (no traceback).

``EvalSetupError`` (ValueError)
 ├─ ``TaskError``            missing/invalid task file or task name, bad ``-T`` args
 ├─ ``UnknownModelError``    a model name that does not resolve
 ├─ ``PolicyFileError``      a malformed approval/review policy (YAML) or unknown approver/reviewer
 ├─ ``BrokerUnreachableError``  ``--broker`` does not answer
 ├─ ``DockerUnreachableError``  ``--sandbox docker`` but no Docker daemon answers
 ├─ ``FleetMisconfiguredError``  workers reject this orchestrator's messages (wrong secret, clock skew)
 └─ ``LogFormatError``       not a toolfleet eval log (eval-retry, log show/dump)
"""

from __future__ import annotations

from orchestrator._errors import ToolfleetError


class EvalSetupError(ToolfleetError, ValueError):
    """Root of the errors a user can fix by changing the command line or a file."""


class PolicyFileError(EvalSetupError):
    pass


class BrokerUnreachableError(EvalSetupError):
    pass


class DockerUnreachableError(EvalSetupError):
    pass


class FleetMisconfiguredError(EvalSetupError):
    """The worker fleet rejects this orchestrator's messages; the eval stops (``Dispatcher.fleet_error``)."""
