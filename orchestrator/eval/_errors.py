"""User-facing eval errors: each is a mistake in the input, shown by the CLI as one line (no traceback).

``SetupError`` (``orchestrator._errors``, a ValueError; ``EvalSetupError`` is its public name here)
 ├─ ``TaskError``            missing/invalid task file or task name, bad ``-T`` args
 ├─ ``UnknownModelError``    a model name that does not resolve
 ├─ ``PolicyFileError``      a malformed approval/review policy (YAML) or unknown approver/reviewer
 ├─ ``BrokerUnreachableError``  ``--broker`` does not answer
 ├─ ``DockerUnreachableError``  ``--sandbox docker`` but no Docker daemon answers
 ├─ ``FleetMisconfiguredError``  workers reject this orchestrator's messages (wrong secret, clock skew)
 └─ ``LogFormatError``       not a toolfleet eval log (eval-retry, log show/dump)
"""

from __future__ import annotations

from orchestrator._errors import SetupError

EvalSetupError = SetupError  # its public name in orchestrator.eval (and before the setup errors were one class)


class PolicyFileError(SetupError):
    pass


class BrokerUnreachableError(SetupError):
    pass


class DockerUnreachableError(SetupError):
    pass


class FleetMisconfiguredError(SetupError):
    """The worker fleet rejects this orchestrator's messages; the eval stops (``Dispatcher.fleet_error``)."""
