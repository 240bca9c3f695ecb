"""Which broker ``eval-retry`` uses (pure; table-tested).

The log keeps the broker URL with its password redacted (``redis://:***@host/0``), never the
password. So a retry takes, in order: ``--broker``; else ``TOOLFLEET_BROKER`` when the log's URL had a
password (the password stays out of argv, where ``ps`` shows it); else the log's URL as recorded. A
redacted URL with nothing to replace it is one clear line, not Redis's "invalid username-password pair".
"""

from __future__ import annotations

from collections.abc import Mapping

from ._errors import SetupError

__all__ = ["BROKER_ENV", "REDACTED", "broker_for_retry"]

BROKER_ENV = "TOOLFLEET_BROKER"
REDACTED = ":***@"


def broker_for_retry(recorded: str | None, override: str | None, env: Mapping[str, str]) -> str | None:
    if override:
        return override
    if not recorded or REDACTED not in recorded:
        return recorded
    from_env = env.get(BROKER_ENV)
    if from_env:
        return from_env
    raise SetupError(f"This eval ran with the broker {recorded}, whose password the log does not keep: "
                         f"set {BROKER_ENV} to its full URL (an environment variable, so no password goes in argv) "
                         "and run eval-retry again.")
