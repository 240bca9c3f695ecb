"""Which capabilities a sandbox's containers keep (pure; table-tested).

Root as Docker gives it: a container whose user is root keeps Docker's default capability set
(``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``, ``SETUID``/``SETGID``, ``NET_RAW``, ...), so ``apt-get
install``, ``chown`` and reading another user's 0700 files work as they do under ``docker run``. Any
other user keeps the hardening: every capability dropped (with ``no-new-privileges`` it could not
gain one anyway). Where root is not allowed (a worker without ``--allow-root-user``), admission has
already written ``cap_drop: ["ALL"]`` into the config, and an explicit list is always obeyed.
Stronger isolation for root (gVisor, user namespaces) is the operator's: ``runtime: runsc``.
"""

from __future__ import annotations

from ..._bounds import parse_user

__all__ = ["dropped_capabilities", "runs_as_root"]


def runs_as_root(user: str | None) -> bool:
    """Whether a container started as ``user`` runs as uid 0: '' or None (an image without ``USER``),
    ``root``, ``0`` however written, with or without a group."""
    if user is None or not user.strip():
        return True
    try:
        return parse_user(user).user in (0, "root")
    except ValueError:
        return False  # Docker refuses such a user anyway


def dropped_capabilities(cap_drop: list[str] | None, user: str | None) -> list[str]:
    """What to drop for a container of ``user`` (its configured user, else its image's USER):
    ``cap_drop`` as given, else nothing for root (Docker's default set stays) and ALL for anyone else."""
    if cap_drop is not None:
        return list(cap_drop)
    return [] if runs_as_root(user) else ["ALL"]


FORK_CAPABILITIES = ("CHOWN", "FOWNER")


def fork_capabilities(cap_add: list[str] | None, fork: bool) -> list[str]:
    """What to add for a container: ``cap_add`` as given, and for a fork of a snapshot CAP_CHOWN and
    CAP_FOWNER, so that the worker's own unpacking (as root) gives each restored file back its owner
    and mode: a capability-less root would leave every file the sandbox user's, a root-only one
    readable. The sandbox's user never holds them (no-new-privileges; a non-root user has none), and
    a root command in the fork (``--allow-root-user`` only) holds no more than in a plain root container."""
    added = list(cap_add or [])
    if fork:
        added += [c for c in FORK_CAPABILITIES if c not in added and f"CAP_{c}" not in added]
    return added
