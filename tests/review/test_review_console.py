"""The human reviewer on a real terminal (``human_reviewer``), driven through a pseudo-terminal.

Each test spawns ``console_driver.py`` with ``pexpect`` (a real pty, so the program sees an interactive
terminal), reads the prompt it prints and answers it as an operator would.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.support.console import DRIVER, ROOT, finish, spawn

# slow: every test drives a console in a child process on a pty
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

def test_s15_s18_human_reviewer_shows_call_view_and_result_and_continue_shows_as_approve() -> None:
    """"human_reviewer() shows the operator the tool call together with the result it returned and asks for a
    decision." / "... so continue is shown there as 'Approve'." """
    child = spawn("review")
    child.expect("Tool result needs review")
    child.expect(r"Decision \(\[a\]pprove / \[t\]erminate\): ")
    shown = child.before
    assert "Call: shell(command='ls -la', cwd='data')" in shown
    assert "Assistant: Running the command." in shown
    assert "working directory: /srv/data" in shown  # the view's context
    assert "```bash\r\nls -la\r\n```" in shown  # the view's rendering of the call
    assert "--- result ---\r\nran: ls -la" in shown  # the result the model would receive
    child.sendline("a")
    child.expect("Explanation \\(optional\\): ")
    child.sendline("looks fine")
    out = finish(child)
    assert "OUTCOME result r0c0: ran: ls -la" in out
    assert "EVENT review r0c0 human continue looks fine" in out


def test_s17_defaults_are_continue_and_terminate_escalate_only_when_in_choices() -> None:
    """"continue and terminate are offered by default; passing choices can add escalate." """
    child = spawn("review")
    child.expect(r"Decision \(\[a\]pprove / \[t\]erminate\): ")
    child.sendline("escalate")  # not offered: asked again
    child.expect("Please answer one of: approve, terminate")
    child.expect(r"Decision \(")
    child.sendline("t")
    child.expect("Explanation")
    child.sendline("")
    out = finish(child)
    assert "OUTCOME terminated: Human operator chose terminate." in out
    assert "EVENT review r0c0 human terminate" in out

    child = spawn("review", "--choices", "continue,terminate,escalate")
    child.expect(r"Decision \(\[a\]pprove / \[t\]erminate / \[e\]scalate\): ")
    child.sendline("e")
    child.expect("Explanation")
    child.sendline("not sure")
    out = finish(child)
    # The last reviewer's escalation continues, like any escalation nobody picks up.
    assert "OUTCOME result r0c0: ran: ls -la" in out
    assert "EVENT review r0c0 human escalate not sure" in out
    assert "EVENT review r0c0 None continue All reviewers escalated." in out


def test_s19_dismissing_the_prompt_terminates_the_sample() -> None:
    """"If the operator dismisses the request without choosing, the sample is terminated." """
    child = spawn("review")
    child.expect(r"Decision \(")
    child.sendeof()
    out = finish(child)
    assert "[dismissed]" in out
    assert "OUTCOME terminated: Review prompt dismissed by the operator." in out


def test_s21_a_model_reviewer_escalates_to_a_human_last_in_the_policy(tmp_path) -> None:
    """"Put it last in the policy so a model reviewer can hand one call's result to a human (an escalate from
    the last reviewer continues, like any escalation nobody picks up)." The design's YAML example, verbatim."""
    policy = tmp_path / "review.yaml"
    policy.write_text("reviewers:\n  - name: output_monitor\n    tools: \"*\"\n\n  - name: human\n    tools: \"*\"\n")
    child = spawn("review", "--yaml", str(policy), "--calls", "3")
    # Only the suspicious result reaches the human.
    child.expect("Tool result needs review")
    child.expect(r"Decision \(")
    assert "cat SUSPICIOUS.txt" in child.before
    child.sendline("approve")
    child.expect("Explanation")
    child.sendline("")
    out = finish(child)
    assert out.count("Tool result needs review") == 0  # no second prompt
    assert "EVENT review r0c0 output_monitor continue Nothing suspicious." in out
    assert "EVENT review r0c1 output_monitor escalate Output contains SUSPICIOUS." in out
    assert "EVENT review r0c1 human continue Human operator chose continue." in out
    assert "EVENT review r0c2 output_monitor continue" in out


def test_cancelling_a_call_while_a_human_review_is_pending_frees_the_terminal() -> None:
    """The cancellation rule with a human reviewer: cancelling the call under review stops the
    sample as an operator limit; the prompt is withdrawn and the terminal is free for the next prompt."""
    child = spawn("review", "--rounds", "2")
    child.expect(r"Decision \(")
    child.kill(signal.SIGUSR1)
    child.expect("OUTCOME terminated: Tool call shell \\(r0c0\\) was cancelled while its review was pending")
    # A second review in the same process gets the terminal (no stale reader swallows the answer);
    # the withdrawn prompt said so before letting go of the terminal.
    child.expect(r"Decision \(")
    assert "[prompt cancelled]" in child.before
    child.sendline("a")
    child.expect("Explanation")
    child.sendline("second")
    out = finish(child)
    assert "EVENT review r1c0 human continue second" in out
    assert "EVENT review r0c0" not in out  # the interrupted review recorded no decision


def test_no_terminal_is_a_clear_error_not_a_hang() -> None:
    """Without an interactive terminal the human reviewer fails at once with a clear error."""
    proc = subprocess.run([sys.executable, DRIVER, "review"], cwd=str(ROOT), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stderr
    expected = "OUTCOME no-terminal: A human review decision is needed but stdin is not an interactive terminal"
    assert expected in proc.stdout
    assert "--review policy.yaml" in proc.stdout


def test_the_human_sees_the_result_the_model_will_see_and_is_told_when_it_is_truncated() -> None:
    """The prompt shows the ``result`` (truncated to ``max_output``, as the model gets it) and says how big the
    untruncated output is."""
    child = spawn("review", "--max-output", "8")
    child.expect(r"Decision \(")
    shown = child.before
    assert "The output of your call to shell was too long to be displayed." in shown
    assert "[the model sees this truncated version; the full output is 11 bytes]" in shown  # "ran: ls -la"
    child.sendline("a")
    child.expect("Explanation")
    child.sendline("")
    out = finish(child)
    assert "OUTCOME result r0c0: \r\nThe output of your call to shell was too long" in out
