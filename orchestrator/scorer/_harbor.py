"""The Harbor verifier as a scorer: only ``test.sh`` writes the rewards, and its files are kept in the log.

After the solver, in the sample's sandbox (each step one ``exec`` through the sandbox seam):

1. every process the agent (or the oracle) left is stopped (``_harbor_stop``): nothing of the agent runs
   beside the verifier; then the sandbox gets the verifier's network policy when ``[verifier]
   network_mode`` differs from the agent's (so nothing of the agent ever runs under the verifier's);
2. as root: ``/tests`` is replaced by the task's ``tests/`` (readable by every user, ``test.sh``
   executable, as Harbor makes it) and ``/logs/verifier`` is made afresh, writable only by the verifier's
   user (``[verifier] user``, else the image's): a root verifier gets a root-owned 0755 directory; another
   user a 0755 directory of its own (made by that user under ``/tmp`` with an unguessable name, which
   root's fresh ``/logs/verifier`` link points to: root in a hardened sandbox cannot ``chown``);
3. ``test.sh`` runs as Harbor runs it (``/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1`` under
   ``bash -c``, from the sandbox's working directory) as the verifier's user, with a fresh, empty
   ``HOME`` (nothing the agent planted in a home directory, ``usercustomize.py``, ``.bashrc``, ``pip.conf``,
   is read), ``TEST_DIR=/tests`` and ``[verifier] env``, within ``[verifier] timeout_sec``;
4. the files ``test.sh`` left in ``/logs/verifier`` are read as its user (bounded: ``_harbor_rewards``),
   the rewards taken from them as Harbor takes them, and the files kept in the score's metadata
   (``verifier_files``, with ``verifier_files_cut`` saying what was cut).

The score's value is the rewards as a dict (``{"reward": 1.0}``); the eval's results show one score per
reward name. No reward file, or one that does not parse, scores ``{"reward": 0.0}`` and the explanation
says why (Harbor counts such a trial 0 in its mean).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from orchestrator._errors import ToolfleetError
from orchestrator.util._sandbox import SandboxTimeoutError, sandbox

from ._harbor_rewards import COLLECT, VERIFIER_DIR, RewardError, parse_collected, parse_rewards
from ._harbor_stop import AgentProcessesError, stop_agent_processes
from ._score import Score, Scorer, mean, scorer, stderr
from ._target import Target

if TYPE_CHECKING:
    from orchestrator.solver._task_state import TaskState

__all__ = ["AgentProcessesError", "RewardError", "VerifierSetupError", "harbor_verifier", "parse_rewards",
           "resolve_env"]

PREPARE_TIMEOUT_S = 120.0
COLLECT_TIMEOUT_S = 120.0
EXPLANATION_TAIL = 4000
TEST_STDOUT = "test-stdout.txt"

# As the verifier's user (when it is not root): a fresh directory only it may write, for its logs and home.
MAKE_OWN_DIRS = """set -e
d=$(mktemp -d /tmp/harbor-verifier.XXXXXXXXXX)
mkdir -m 0755 "$d/logs"
mkdir -m 0700 "$d/home"
chmod 0755 "$d"
printf '%s' "$d"
"""
# As root, after the agent's processes are gone. $1: the verifier's own directory ("" for a root verifier).
PREPARE_TESTS = f"""set -e
own="$1"
rm -rf /tests {VERIFIER_DIR}
mkdir -p /tests /logs
chmod 0755 /logs
base64 -d | tar -xzf - -C /tests --no-same-owner
chmod -R a+rX /tests
chmod a+x /tests/test.sh
if [ -n "$own" ]; then
  ln -s "$own/logs" {VERIFIER_DIR}
  printf '%s' "$own/home"
else
  mkdir -m 0755 {VERIFIER_DIR}
  printf '%s' "$(mktemp -d /tmp/harbor-verifier-home.XXXXXXXXXX)"
fi
"""
RUN_TEST = f"/tests/test.sh > {VERIFIER_DIR}/{TEST_STDOUT} 2>&1"


class VerifierSetupError(ToolfleetError, RuntimeError):
    """The verifier could not be set up in the sandbox (one sentence: an infrastructure error, retried)."""


def resolve_env(values: dict[str, str], task_env: list[str] | None = None) -> dict[str, str]:
    """``[verifier] env`` / ``[solution] env`` with their ``${VAR}`` filled from what ``--task-env`` passes."""
    from orchestrator.dataset._harbor_env import TaskEnv, resolve_whole_values

    return resolve_whole_values(values, TaskEnv(task_env or [], os.environ), "env")


async def _checked(box: Any, cmd: list[str], what: str, **kwargs: Any) -> str:
    result = await box.exec(cmd, **kwargs)
    if result.returncode != 0:
        raise VerifierSetupError(f"Could not {what} (exit {result.returncode}): "
                                 f"{(result.stderr or result.stdout)[-500:].strip()}")
    return str(result.stdout)


async def _verifier_uid(box: Any, user: str | None) -> str:
    return (await _checked(box, ["id", "-u"], "find the verifier's user", user=user,
                           timeout=PREPARE_TIMEOUT_S)).strip()


@scorer(metrics=[mean(), stderr()], name="harbor")
def harbor_verifier() -> Scorer:
    """Run the task's ``tests/test.sh`` in the sample's sandbox and score its rewards (module doc)."""

    async def score(state: TaskState, target: Target) -> Score:
        from orchestrator.dataset._harbor import pack_task_dir
        from orchestrator.dataset._harbor_network import enter_phase

        meta = state.metadata["harbor"]
        box = sandbox()
        user = meta.get("verifier_user")
        archive = pack_task_dir(meta["dir"], "tests")
        env = {"TEST_DIR": "/tests", **resolve_env(meta.get("verifier_env") or {}, meta.get("task_env"))}
        await stop_agent_processes(box)
        await enter_phase(meta, "verifier", before="agent")  # the agent's processes are gone: widen only now
        own = "" if await _verifier_uid(box, user) == "0" else (
            await _checked(box, ["sh", "-c", MAKE_OWN_DIRS], "make the verifier's directory", user=user,
                           timeout=PREPARE_TIMEOUT_S)).strip()
        home = (await _checked(box, ["sh", "-c", PREPARE_TESTS, "prepare", own], "copy tests/ to /tests",
                               input=archive, user="root", timeout=PREPARE_TIMEOUT_S)).strip()
        timeout = float(meta["verifier_timeout"])
        try:
            run = await box.exec(["bash", "-c", RUN_TEST], env={**env, "HOME": home}, user=user, timeout=timeout)
            returncode, timed_out = run.returncode, False
        except SandboxTimeoutError:
            returncode, timed_out = 124, True
        collected = parse_collected(await _checked(box, ["sh", "-c", COLLECT], "read /logs/verifier", user=user,
                                                   timeout=COLLECT_TIMEOUT_S))
        verdict = f"test.sh timed out after {timeout:g} s" if timed_out else f"test.sh exited {returncode}"
        metadata: dict[str, Any] = {"returncode": returncode, "timed_out": timed_out}
        try:
            if timed_out:  # as Harbor: a verifier that times out gives no reward, whatever it wrote
                raise RewardError("no reward is taken from a verifier that timed out")
            rewards = parse_rewards(collected.content("reward.json"), collected.content("reward.txt"))
        except RewardError as exc:
            rewards = {"reward": 0.0}
            metadata["verifier_error"] = str(exc)
            verdict += f"; {exc}"
        metadata["verifier_files"] = [f.log_entry() for f in collected.files.values()]
        if collected.notes:
            metadata["verifier_files_cut"] = collected.notes
        stdout = collected.files.get(TEST_STDOUT)
        tail = stdout.text()[-EXPLANATION_TAIL:] if stdout is not None else ""
        return Score(value=rewards, answer=state.output.completion or None,
                     explanation=f"{verdict}.\n{tail}".rstrip(), metadata=metadata)

    return score
