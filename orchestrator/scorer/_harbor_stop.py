"""Before a Harbor verifier runs, every process the agent (or the oracle) left in the sandbox is stopped.

A process the agent leaves running survives its last tool call (``nohup ... &``, a daemon): left alone it
could rewrite the reward while the verifier runs. Through the sandbox seam (``exec``), ``SWEEP`` runs in
the sample's default container (the agent's; a service's container is the task's own and has its own PID
namespace) and sends SIGKILL to every process there except the container's own:

* PID 1, and the keep-alive: when PID 1 is an init (Docker's ``init``, tini, ...), its child with the
  lowest pid, the container's command (its first process: a fresh PID namespace hands pids out in
  order; a process the agent orphans is re-parented to PID 1 too, with a later pid); without an init,
  PID 1 is the keep-alive itself and every child of it is an orphan;
* toolfleet's exec agents: a process whose parent is outside the container (``PPid`` 0) was started by
  the Docker Engine (``docker exec``), never by anything in the sandbox;
* the sweep itself and its ancestors.

It sweeps until a pass kills nothing (bounded), and prints ``left <uid> <pid>`` for each process it may
not signal: root in a hardened sandbox has no ``CAP_KILL``, so it cannot signal the agent user's
processes. Those are then swept by their own user (a process may always signal its own uid's). If
anything is still running after that, the verifier does not run: ``AgentProcessesError``.

A sweep needs only POSIX ``sh`` and ``/proc`` (images without python3 included).
"""

from __future__ import annotations

from typing import Any

from orchestrator._errors import ToolfleetError

__all__ = ["SWEEP", "AgentProcessesError", "parse_left", "stop_agent_processes"]

SWEEP_TIMEOUT_S = 120.0  # a bound, not a duration: a sweep takes well under a second
MAX_PASSES = 8

SWEEP = r"""
status() {
  while IFS=: read -r k v; do if [ "$k" = "$2" ]; then set -- $v; echo "$1"; return 0; fi; done < "/proc/$1/status"
}
ppid() { status "$1" PPid 2>/dev/null; }
me=$$; keep=" 1 "; p=$me
while [ -n "$p" ] && [ "$p" != 0 ]; do keep="$keep$p "; p=$(ppid "$p"); done
read -r init < /proc/1/comm
case "$init" in
  docker-init|tini|catatonit|dumb-init|init)
    # PID 1 is an init: its child with the lowest pid is the container's command, the keep-alive (a fresh PID
    # namespace hands pids out in order, and the keep-alive is the first process it starts).
    low=""
    for d in /proc/[0-9]*; do
      pid=${d#/proc/}
      if [ "$pid" != 1 ] && [ "$(ppid "$pid")" = 1 ]; then
        if [ -z "$low" ] || [ "$pid" -lt "$low" ]; then low=$pid; fi
      fi
    done
    keep="$keep$low ";;
esac
pass=0
while [ "$pass" -lt MAX_PASSES ]; do
  pass=$((pass+1)); killed=0; left=""
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$keep" in *" $pid "*) continue;; esac
    pp=$(ppid "$pid") || continue
    [ -z "$pp" ] && continue
    [ "$pp" = 0 ] && continue
    [ "$pp" = "$me" ] && continue
    [ "$(status "$pid" State 2>/dev/null)" = Z ] && continue
    if kill -9 "$pid" 2>/dev/null; then killed=$((killed+1)); else left="$left
left $(status "$pid" Uid 2>/dev/null) $pid"; fi
  done
  [ "$killed" = 0 ] && break
done
[ -n "$left" ] && printf '%s\n' "$left"
true
""".replace("MAX_PASSES", str(MAX_PASSES))


class AgentProcessesError(ToolfleetError, RuntimeError):
    """Processes the agent left could not be stopped: the verifier would not run alone, so it does not run."""


def parse_left(output: str) -> dict[str, list[str]]:
    """``left <uid> <pid>`` lines -> pids by uid (a line without a uid, a process gone meanwhile, is dropped)."""
    left: dict[str, list[str]] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "left" and parts[1].isdigit() and parts[2].isdigit():
            left.setdefault(parts[1], []).append(parts[2])
    return left


async def stop_agent_processes(box: Any) -> None:
    """Sweep as root, then as each uid whose processes root may not signal, then check (module doc)."""
    left = await _sweep(box, "root")
    for uid in sorted(left):
        if uid != "0":
            await _sweep(box, uid)
    remaining = await _sweep(box, "root")
    if remaining:
        shown = ", ".join(f"{len(pids)} of uid {uid}" for uid, pids in sorted(remaining.items()))
        raise AgentProcessesError(f"Could not stop the processes the agent left in the sandbox ({shown}): the "
                                  "verifier does not run beside them.")


async def _sweep(box: Any, user: str) -> dict[str, list[str]]:
    result = await box.exec(["sh", "-c", SWEEP], user=user, timeout=SWEEP_TIMEOUT_S)
    if result.returncode != 0:
        raise AgentProcessesError(f"Could not stop the agent's processes (the sweep as {user} exited "
                                  f"{result.returncode}: {(result.stderr or result.stdout)[-300:].strip()}).")
    return parse_left(result.stdout)
