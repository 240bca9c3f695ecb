"""User-facing eval errors: each is a mistake in the input, shown by the CLI as one line (no traceback).

All are ``SetupError`` (``orchestrator._errors``, a ValueError; ``EvalSetupError`` is its public name
here); ``orchestrator/_errors.py`` draws the whole tree. Defined here:

- ``PolicyFileError``          a malformed approval/review policy (YAML) or unknown approver/reviewer
- ``BrokerUnreachableError``   ``--broker`` does not answer
- ``DockerUnreachableError``   ``--sandbox docker`` but no Docker daemon answers
- ``FleetMisconfiguredError``  workers reject this orchestrator's messages (wrong secret, clock skew)
"""

from __future__ import annotations

from orchestrator._errors import SetupError as SetupError  # the eval modules import it from here

EvalSetupError = SetupError  # its public name in orchestrator.eval (and before the setup errors were one class)


class PolicyFileError(SetupError):
    pass


class BrokerUnreachableError(SetupError):
    pass


class DockerUnreachableError(SetupError):
    pass


class FleetMisconfiguredError(SetupError):
    """The worker fleet rejects this orchestrator's messages; the eval stops (``Dispatcher.fleet_error``)."""
