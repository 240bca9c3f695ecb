"""A Harbor task's network, phase by phase, with real Docker and the host's egress enforcer (embedded).

``[environment] network_mode = "public"`` with ``[agent] network_mode = "no-network"``: the oracle (the agent)
cannot reach the test internet, the verifier (which inherits the environment's policy) can, and the sandbox's
policy changes between the two only after the agent's processes are gone. The test internet's address is
private, so the operator allows it (``egress_allow``), as ``--egress-allow`` does.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.eval import eval_async
from orchestrator.eval._harbor import ORACLE_MODEL
from tests.support.internet import ALLOWED_RANGE, SMALL_FILE, LocalInternet

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "eval" / "harbor_fixtures" / "broken-solution"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

FETCH = ("python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=5).read(); print(\"reached\")' "
         f"\"$TB_URL/{SMALL_FILE}\" 2>/dev/null || echo blocked")


@pytest.fixture(scope="module")
def internet(sandbox_image: str) -> Iterator[LocalInternet]:
    with LocalInternet() as started:
        yield started


async def test_agent_and_verifier_phases_get_their_own_network(tmp_path: Path, internet: LocalInternet,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TB_URL", internet.url)
    task = tmp_path / "tasks" / "phases"
    shutil.copytree(FIXTURE, task)
    (task / "task.toml").write_text('[environment]\nnetwork_mode = "public"\nmemory_mb = 256\n'
                                    'env = { TB_URL = "${TB_URL}" }\n[agent]\nnetwork_mode = "no-network"\n'
                                    "timeout_sec = 120\n[verifier]\ntimeout_sec = 120\n")
    (task / "solution" / "solve.sh").write_text(f"{FETCH} > /home/sandbox/agent-saw.txt\n")
    (task / "tests" / "test.sh").write_text(f"saw=$({FETCH})\necho \"agent=$(cat /home/sandbox/agent-saw.txt) "
                                            "verifier=$saw\" > /logs/verifier/seen.txt\n"
                                            "[ \"$saw\" = reached ] && echo 1 > /logs/verifier/reward.txt\n")
    [log] = await eval_async(f"harbor:{task.parent}", ORACLE_MODEL, log_dir=tmp_path / "logs",
                             task_args={"oracle": True, "task_env": ["TB_URL"]}, egress_allow=[ALLOWED_RANGE])
    [sample] = log.samples
    assert sample.error is None, sample.error
    files = {f["name"]: f["text"] for f in sample.scores["harbor"].metadata["verifier_files"]}
    assert files.get("seen.txt") == "agent=blocked verifier=reached\n", files
    assert sample.scores["harbor"].value == {"reward": 1.0}
    assert [r.path for r in internet.requests()].count(f"/{SMALL_FILE}") == 1  # the verifier's, not the agent's
