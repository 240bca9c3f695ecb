"""Who a command in a worker's sandbox runs as: admitted by the admission rules, then pinned to numbers.

A tool may ask for a user per command (``bash(user="root")`` is a factory parameter, so a message
can carry it), and a sandbox config may name its commands' user. On a worker both go through one
``ExecUserGate`` per sandbox container (installed on the environment when the worker opens it; an
embedded orchestrator installs none — its own code is trusted):

* the spec is refused by ``_bounds.user_refusal`` (``root``, uid or gid 0 however written);
* a name, or a uid without a group, is resolved inside that container (``getent passwd``, run as
  ``65534:65534`` so the lookup itself never runs as the user being checked) and the command then
  runs as the numbers ``uid:gid``: a name that resolves to 0 is refused, and Docker never falls
  back to group 0 for a uid missing from the image's ``/etc/passwd``.

The container's own answer is only believed as far as it narrows: whatever it prints, 0 is refused.
"""

from __future__ import annotations

from typing import Any

from ._bounds import parse_user, user_refusal

__all__ = ["ExecUserGate", "LOOKUP_USER"]

LOOKUP_USER = "65534:65534"  # nobody: the lookups run as a uid every image has, without privileges
_LOOKUP_TIMEOUT = 30.0


class ExecUserGate:
    """``await gate(env, user)`` -> the user spec to run as (None: the container's default), or
    ``PermissionError`` with one model-visible line."""

    def __init__(self, allow_root: bool = False, default_user: str | None = None, resolve: bool = True) -> None:
        self.allow_root = allow_root
        self.default_user = default_user or None  # the user a message configured for the sandbox's commands
        self.resolve = resolve  # False: local sandboxes (host users; the pure check only)
        self._pinned: dict[str, str] = {}

    async def __call__(self, env: Any, user: str | None) -> str | None:
        asked = user if user is not None else self.default_user
        if asked is None or asked == LOOKUP_USER:
            return user  # the image's own USER (the operator's choice), or our own lookup
        pinned = self._pinned.get(asked)
        if pinned is not None:
            return pinned
        why = user_refusal(asked, self.allow_root)
        if why is not None:
            raise PermissionError(1, f"This worker refuses to run commands as user {asked!r}: {why}.")
        if not self.resolve:
            return user
        parsed = parse_user(asked)
        uid = await self._lookup(env, "passwd", parsed.user, asked)
        gid = parsed.group if parsed.group is not None else (uid[1] if uid[1] is not None else uid[0])
        if isinstance(gid, str):
            gid = (await self._lookup(env, "group", gid, asked))[0]
        pinned = f"{uid[0]}:{gid}"
        why = user_refusal(pinned, self.allow_root)
        if why is not None:
            raise PermissionError(1, f"This worker refuses to run commands as user {asked!r} ({pinned} in the "
                                     f"sandbox): {why}.")
        self._pinned[asked] = pinned
        return pinned

    async def _lookup(self, env: Any, database: str, key: int | str, asked: str) -> tuple[int, int | None]:
        """(id, primary gid) of a passwd or group entry in the container; a uid with no entry keeps its number."""
        raw = await env.exec_raw(["getent", database, str(key)], user=LOOKUP_USER, timeout=_LOOKUP_TIMEOUT)
        line = raw.stdout.decode("utf-8", "replace").splitlines()[0] if raw.stdout else ""
        fields = line.split(":")
        try:
            if database == "passwd" and len(fields) >= 4:
                return int(fields[2]), int(fields[3])
            if database == "group" and len(fields) >= 3:
                return int(fields[2]), None
        except ValueError:
            pass
        if isinstance(key, int):
            return key, None  # a uid the image does not list: it runs as uid:uid (never gid 0)
        raise PermissionError(1, f"Cannot run commands as user {asked!r}: no {database} entry {key!r} in the sandbox.")


def gate_installer(allow_root: bool, config: dict[str, Any]) -> Any:
    """``on_created`` for ``open_sandbox_recorded``: a gate on the sandbox and on each of its services
    (a service's default user is its container's, admitted with the config)."""
    resolve = config.get("type") == "docker"

    def install(env: Any) -> None:
        env.user_gate = ExecUserGate(allow_root, config.get("user"), resolve)
        for service in (getattr(env, "services", None) or {}).values():
            service.user_gate = ExecUserGate(allow_root, None, resolve)

    return install
