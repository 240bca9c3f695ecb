"""The human approver on a real terminal (``human_approver``), via a pseudo-terminal.

Spawns ``tests/review/console_driver.py approve`` with ``pexpect`` and answers as an operator would.
"""

from __future__ import annotations

import subprocess
import sys

import pexpect
import pytest

from tests.support import console
from tests.support.console import DRIVER, ROOT, finish

pytestmark = pytest.mark.timeout(60)

def spawn(*args: str) -> pexpect.spawn:
    return console.spawn("approve", *args)


@pytest.mark.slow  # drives the console approver in a child process on a pty
def test_approve_shows_the_call_and_its_view_and_runs_it() -> None:
    child = spawn()
    child.expect("Tool call needs approval")
    child.expect(r"Decision \(\[a\]pprove / \[r\]eject / \[t\]erminate\): ")
    shown = child.before
    assert "Call: shell(command='ls -la', cwd='data')" in shown
    assert "working directory: /srv/data" in shown and "```bash\r\nls -la\r\n```" in shown
    assert "--- result ---" not in shown  # nothing has run yet
    child.sendline("approve")
    child.expect("Explanation")
    child.sendline("ok to list")
    out = finish(child)
    assert "OUTCOME result r0c0: ran: ls -la" in out
    assert "EVENT approval r0c0 human approve ok to list" in out


@pytest.mark.slow  # drives the console approver in a child process on a pty
def test_reject_reaches_the_model_as_an_approval_error() -> None:
    child = spawn()
    child.expect(r"Decision \(")
    child.sendline("r")
    child.expect("Explanation")
    child.sendline("not that")
    out = finish(child)
    assert "OUTCOME result r0c0: approval: not that" in out


@pytest.mark.slow  # drives the console approver in a child process on a pty
def test_unknown_answers_are_asked_again_and_escalate_only_when_offered() -> None:
    child = spawn()
    child.expect(r"Decision \(")
    child.sendline("maybe")
    child.expect("Please answer one of: approve, reject, terminate")
    child.sendline("t")
    child.expect("Explanation")
    child.sendline("")
    out = finish(child)
    assert "OUTCOME terminated: Human operator chose terminate." in out

    child = spawn("--choices", "approve,reject,terminate,escalate")
    child.expect(r"Decision \(\[a\]pprove / \[r\]eject / \[t\]erminate / \[e\]scalate\): ")
    child.sendline("e")
    child.expect("Explanation")
    child.sendline("")
    out = finish(child)
    # The only approver escalated: nobody granted approval (as Inspect words it).
    assert "OUTCOME result r0c0: approval: No approval granted for tool shell" in out


@pytest.mark.slow  # drives the console approver in a child process on a pty
def test_dismissing_the_prompt_terminates() -> None:
    child = spawn()
    child.expect(r"Decision \(")
    child.sendeof()
    out = finish(child)
    assert "OUTCOME terminated: Approval prompt dismissed by the operator." in out


@pytest.mark.slow  # drives the console approver in a child process on a pty
def test_no_terminal_is_a_clear_error_not_a_hang() -> None:
    proc = subprocess.run([sys.executable, DRIVER, "approve"], cwd=str(ROOT), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stderr
    assert "A human approval decision is needed but stdin is not an interactive terminal" in proc.stdout
    assert "--approval policy.yaml" in proc.stdout


def test_unknown_choice_names_are_rejected_up_front() -> None:
    from orchestrator.approval import human_approver
    from orchestrator.review import human_reviewer

    with pytest.raises(ValueError, match="Unknown human approver choices"):
        human_approver(["approve", "maybe"])
    with pytest.raises(ValueError, match="Unknown human reviewer choices"):
        human_reviewer(["continue", "reject"])
