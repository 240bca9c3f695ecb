"""The Harbor verifier as a scorer: ``tests/`` to ``/tests``, run ``test.sh``, read the rewards.

After the solver, as Harbor does: the task's ``tests/`` directory is copied to ``/tests`` (replacing
anything there; as root, readable by every user), ``/logs/verifier`` is made afresh (writable by every
user, so whatever the agent left there cannot pass for a reward), and ``bash /tests/test.sh`` runs as
the task's verifier user (``[verifier] user``, else the image's) with ``[verifier] env`` and
``TEST_DIR=/tests``, within ``[verifier] timeout_sec``. The rewards are then read from
``/logs/verifier/reward.json`` (an object of numbers) or ``reward.txt`` (one number), as Harbor reads
them (``parse_rewards``). The score's value is the rewards as a dict (``{"reward": 1.0}``); the eval's
results show one score per reward name. No reward file, or one that does not parse, scores
``{"reward": 0.0}`` and the explanation says why.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator._errors import ToolfleetError
from orchestrator.util._sandbox import sandbox

from ._score import Score, Scorer, mean, scorer, stderr
from ._target import Target

if TYPE_CHECKING:
    from orchestrator.solver._task_state import TaskState

__all__ = ["RewardError", "harbor_verifier", "parse_rewards"]

VERIFIER_DIR = "/logs/verifier"
REWARD_READ_BYTES = 64 * 1024
PREPARE_TIMEOUT_S = 120.0
EXPLANATION_TAIL = 4000

# As root (capabilities dropped: it owns what it creates, it cannot read other users' private files):
# the tests replace /tests; the agent's /logs/verifier (if any) is moved aside, a fresh one is made.
PREPARE_TESTS = f"""set -e
rm -rf /tests
mkdir -p /tests /logs
base64 -d | tar -xzf - -C /tests --no-same-owner
chmod -R a+rX /tests
if [ -e {VERIFIER_DIR} ]; then mv {VERIFIER_DIR} /logs/.verifier-before-tests-$(date +%s%N); fi
mkdir -p {VERIFIER_DIR}
chmod 777 {VERIFIER_DIR}
"""


class RewardError(ToolfleetError, ValueError):
    """The verifier's reward file does not say a reward."""


def parse_rewards(reward_json: str | None, reward_txt: str | None) -> dict[str, float]:
    """Harbor's rule: ``reward.json`` (an object; its numeric values) wins over ``reward.txt`` (one
    number), which also fills ``reward`` when the JSON has none. Non-finite numbers are refused."""
    if reward_json is not None:
        if not reward_json.strip():
            raise RewardError("reward.json is empty")
        try:
            parsed: Any = json.loads(reward_json)
        except ValueError as exc:
            raise RewardError(f"reward.json is not JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise RewardError("reward.json must be a JSON object of numbers")
        rewards = {str(k): float(v) for k, v in parsed.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "reward" not in rewards and reward_txt is not None:
            try:
                rewards.update(parse_rewards(None, reward_txt))
            except RewardError:
                pass  # reward.txt is only a fallback beside a JSON report
        if not rewards:
            raise RewardError("reward.json holds no numeric reward")
        return _finite(rewards)
    if reward_txt is None:
        raise RewardError(f"no reward file ({VERIFIER_DIR}/reward.txt or reward.json)")
    if not reward_txt.strip():
        raise RewardError("reward.txt is empty")
    try:
        value = float(reward_txt.strip())
    except ValueError:
        raise RewardError(f"reward.txt is not a number: {reward_txt.strip()[:80]!r}") from None
    return _finite({"reward": value})


def _finite(rewards: dict[str, float]) -> dict[str, float]:
    bad = [k for k, v in rewards.items() if not math.isfinite(v)]
    if bad:
        raise RewardError(f"reward {bad[0]!r} is not a finite number")
    return rewards


def resolve_env(values: dict[str, str]) -> dict[str, str]:
    from orchestrator.dataset._harbor_config import resolve_env_templates

    return resolve_env_templates(values, dict(os.environ))


@scorer(metrics=[mean(), stderr()], name="harbor")
def harbor_verifier() -> Scorer:
    """Run the task's ``tests/test.sh`` in the sample's sandbox and score its rewards (module doc)."""

    async def score(state: "TaskState", target: Target) -> Score:
        from orchestrator.dataset._harbor import pack_directory

        meta = state.metadata["harbor"]
        box = sandbox()
        archive = pack_directory(Path(meta["dir"]) / "tests")
        prepared = await box.exec(["sh", "-c", PREPARE_TESTS], input=archive, user="root", timeout=PREPARE_TIMEOUT_S)
        if prepared.returncode != 0:
            raise RuntimeError(f"Could not copy tests/ to /tests (exit {prepared.returncode}): "
                               f"{(prepared.stderr or prepared.stdout)[-500:]}")
        env = {"TEST_DIR": "/tests", **resolve_env(meta.get("verifier_env") or {})}
        timeout = float(meta["verifier_timeout"])
        try:
            run = await box.exec(["bash", "/tests/test.sh"], env=env, user=meta.get("verifier_user"), timeout=timeout)
            returncode, output, timed_out = run.returncode, run.stdout + run.stderr, False
        except TimeoutError as exc:
            returncode, timed_out = 124, True
            output = str(getattr(exc, "stdout", "") or "") + str(getattr(exc, "stderr", "") or "")
        files = {}
        for name in ("reward.json", "reward.txt"):
            read = await box.exec(["head", "-c", str(REWARD_READ_BYTES), f"{VERIFIER_DIR}/{name}"], user="root",
                                  timeout=30)
            files[name] = read.stdout if read.returncode == 0 else None
        verdict = f"test.sh timed out after {timeout:g} s" if timed_out else f"test.sh exited {returncode}"
        metadata: dict[str, Any] = {"returncode": returncode, "timed_out": timed_out}
        try:
            rewards = parse_rewards(files["reward.json"], files["reward.txt"])
        except RewardError as exc:
            rewards = {"reward": 0.0}
            metadata["verifier_error"] = str(exc)
            verdict += f"; {exc}"
        return Score(value=rewards, answer=state.output.completion or None,
                     explanation=f"{verdict}.\n{output[-EXPLANATION_TAIL:]}".rstrip(), metadata=metadata)

    return score
