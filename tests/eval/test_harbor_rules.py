"""Harbor task rules, by tables (pure): the network plan of task.toml, ${VAR} and what a task may read,
timeouts and their multipliers, what the verifier's collector prints, the agent sweep's leftovers, and
which failures are retried."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from orchestrator.dataset._harbor_config import (
    MAX_TIMEOUT_S,
    TaskConfigError,
    TimeoutMultipliers,
    map_task_config,
    parse_task_config,
)
from orchestrator.dataset._harbor_env import TaskEnv, TaskEnvError, interpolate, name_refusal, resolve_whole_values
from orchestrator.dataset._harbor_network import NetworkPolicy
from orchestrator.eval._harbor import harbor_retryable
from orchestrator.model._model import ModelError
from orchestrator.scorer._harbor_rewards import RewardError, parse_collected
from orchestrator.scorer._harbor_stop import parse_left

PUBLIC, NONE = NetworkPolicy("public"), NetworkPolicy("no-network")


def _plan(toml: str) -> Any:
    return map_task_config(parse_task_config(toml)).network


@pytest.mark.parametrize(("toml", "setup", "agent", "verifier"), [
    ("", PUBLIC, PUBLIC, PUBLIC),  # Harbor's default is public
    ('[environment]\nnetwork_mode = "no-network"', NONE, NONE, NONE),
    ("[environment]\nallow_internet = false", NONE, NONE, NONE),  # the legacy key, when network_mode is unset
    ("[environment]\nallow_internet = true", PUBLIC, PUBLIC, PUBLIC),
    ('[environment]\nallow_internet = false\nnetwork_mode = "public"', PUBLIC, PUBLIC, PUBLIC),  # explicit wins
    (('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["PyPI.org.", "*.Example.com", "10.0.0.0/8", '
      '"2001:DB8::1", "pypi.org"]'), *(NetworkPolicy("allowlist", ("pypi.org", "*.example.com", "10.0.0.0/8",
                                                                 "2001:db8::1")),) * 3),
    ('[agent]\nnetwork_mode = "no-network"', PUBLIC, NONE, PUBLIC),  # a phase override, the verifier inherits
    ('[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.io"]',
     NONE, NONE, NetworkPolicy("allowlist", ("a.io",))),
])
def test_network_plan(toml: str, setup: NetworkPolicy, agent: NetworkPolicy, verifier: NetworkPolicy) -> None:
    plan = _plan(toml)
    assert (plan.setup, plan.agent, plan.verifier) == (setup, agent, verifier)


@pytest.mark.parametrize(("toml", "error"), [
    ('[environment]\nallowed_hosts = ["a.io"]', "environment.allowed_hosts: only valid with network_mode = "),
    ('[agent]\nallowed_hosts = ["a.io"]', "agent.allowed_hosts: only valid with"),
    ('[verifier]\nnetwork_mode = "public"\nallowed_hosts = ["a.io"]', "verifier.allowed_hosts: only valid with"),
    ('[agent]\nnetwork_mode = "internet"', "agent.network_mode: 'internet' is not one of"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://a.io/x"]', "not a URL, port or path"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.io:443"]', "not a URL, port or path"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["10.0.0.1/8"]', "not a URL, port or path"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a*.io"]', "a wildcard is '\\*.' before"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.10.0.0.1"]', "names hosts, not an IP"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = [" "]', "must not be empty"),
])
def test_network_refused(toml: str, error: str) -> None:
    with pytest.raises(TaskConfigError, match=error):
        _plan(toml)


@pytest.mark.parametrize(("toml", "changes", "modes"), [
    ("", [], {"public"}),
    ('[agent]\nnetwork_mode = "no-network"', [("agent", NONE), ("verifier", PUBLIC)], {"public", "none"}),
    ('[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"', [("verifier", PUBLIC)],
     {"public", "none"}),
])
def test_network_phase_changes(toml: str, changes: list[Any], modes: set[str]) -> None:
    plan = _plan(toml)
    assert plan.changes() == changes and plan.modes() == modes


@pytest.mark.parametrize(("policy", "fields"), [
    (PUBLIC, {"network_mode": "public"}),
    (NONE, {"network_mode": "none"}),
    (NetworkPolicy("allowlist", ("a.io",)), {"network_mode": "allowlist", "allowed_hosts": ["a.io"]}),
])
def test_network_sandbox_fields(policy: NetworkPolicy, fields: dict[str, Any]) -> None:
    assert policy.sandbox_fields() == fields


# -- ${VAR}: what a task may read ------------------------------------------------------------------

HOST = {"TB_URL": "http://x", "TB_OTHER": "o", "TOOLFLEET_SECRET": "s3cret", "AWS_SECRET_ACCESS_KEY": "k",
        "HOME": "/root", "EMPTY": ""}


@pytest.mark.parametrize(("name", "refused"), [
    ("TB_URL", False), ("TOOLFLEET_SECRET", True), ("toolfleet_broker", True), ("OPENAI_API_KEY", True),
    ("GITHUB_TOKEN", True), ("DB_PASSWORD", True), ("SSH_AUTH_SOCK", True), ("MAX_TOKENS", False),
    ("PRIVATE_URL", True), ("HF_HOME", False),
])
def test_name_refusal(name: str, refused: bool) -> None:
    assert (name_refusal(name) is not None) == refused


@pytest.mark.parametrize(("names", "error"), [
    (["TOOLFLEET_SECRET"], "--task-env TOOLFLEET_SECRET: toolfleet never passes its own"),
    (["OPENAI_API_KEY"], "credential-looking"),
    (["A-B"], "a variable name or a pattern"),
])
def test_task_env_flag_refused(names: list[str], error: str) -> None:
    with pytest.raises(TaskEnvError, match=error):
        TaskEnv(names, HOST)


@pytest.mark.parametrize(("names", "values", "expected"), [
    (["TB_URL"], {"a": "${TB_URL}", "b": "lit", "c": "pre-${TB_URL}"}, {"a": "http://x", "b": "lit",
                                                                        "c": "pre-${TB_URL}"}),  # whole values only
    (["TB_*"], {"a": "${TB_OTHER}"}, {"a": "o"}),  # a pattern passes the names it matches
    ([], {"a": "${NOT_SET:-dflt}"}, {"a": "dflt"}),
    ([], {"a": "${HOME:-dflt}"}, {"a": "dflt"}),  # set here but not passed: its default, never its value
    (["*"], {"a": "${TOOLFLEET_SECRET:-x}"}, None),  # a refused name is refused, even under '*'
    ([], {"a": "${TOOLFLEET_SECRET}"}, None),
    ([], {"a": "${HOME}"}, None),  # set but not passed, no default: one line naming --task-env HOME
    (["TB_*"], {"a": "${TB_NOPE}"}, None),  # passed but not set, no default: as Harbor, an error
])
def test_whole_value_templates(names: list[str], values: dict[str, str], expected: dict[str, str] | None) -> None:
    env = TaskEnv(names, HOST)
    if expected is None:
        with pytest.raises(TaskEnvError):
            resolve_whole_values(values, env, "environment.env")
    else:
        assert resolve_whole_values(values, env, "environment.env") == expected


def test_template_refusals_say_why() -> None:
    env = TaskEnv([], HOST)
    with pytest.raises(TaskEnvError, match=r"environment.env.a refers to \$\{TOOLFLEET_SECRET\}: toolfleet never"):
        resolve_whole_values({"a": "${TOOLFLEET_SECRET}"}, env, "environment.env")
    with pytest.raises(TaskEnvError, match=r"set here but not passed to tasks: pass it with --task-env HOME"):
        resolve_whole_values({"a": "${HOME}"}, env, "environment.env")


@pytest.mark.parametrize(("text", "expected"), [
    ("${CPUS}", "2"), ("$CPUS-x", "2-x"), ("$$CPUS", "$CPUS"), ("a${TB_URL}b", "ahttp://xb"),
    ("${NOT_SET}", ""), ("${NOT_SET:-d}", "d"), ("${NOT_SET-d}", "d"), ("${EMPTY_TASK:-d}", "d"),
    ("${EMPTY_TASK-d}", ""), ("${TB_URL:+yes}", "yes"), ("${NOT_SET:+yes}", ""), ("${HOME:-d}", "d"),
])
def test_compose_interpolation(text: str, expected: str) -> None:
    env = TaskEnv(["TB_*", "NOT_SET"], HOST)
    assert interpolate(text, {"CPUS": "2", "EMPTY_TASK": ""}, env, "compose") == expected


@pytest.mark.parametrize(("text", "error"), [
    ("${TOOLFLEET_SECRET}", "toolfleet never passes its own"),
    ("x $AWS_SECRET_ACCESS_KEY", "credential-looking"),
    ("${HOME}", "pass it with --task-env HOME"),
    ("${NOT_SET:?give it}", "required: give it"),
])
def test_compose_interpolation_refused(text: str, error: str) -> None:
    with pytest.raises(TaskEnvError, match=error):
        interpolate(text, {}, TaskEnv(["NOT_SET"], HOST), "compose")


# -- timeouts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("multipliers", "toml", "agent", "verifier", "build"), [
    ({}, "[agent]\ntimeout_sec = 100", 100.0, 600.0, 600.0),
    ({"timeout": 2}, "[agent]\ntimeout_sec = 100", 200.0, 1200.0, 1200.0),
    ({"timeout": 2, "agent": 0.5}, "[agent]\ntimeout_sec = 100", 50.0, 1200.0, 1200.0),  # its own wins
    ({"verifier": 3, "build": 0.1}, "", MAX_TIMEOUT_S, 1800.0, 60.0),
    ({"timeout": 1000}, "[agent]\ntimeout_sec = 12000", MAX_TIMEOUT_S, MAX_TIMEOUT_S, MAX_TIMEOUT_S),  # capped
])
def test_timeouts(multipliers: dict[str, float], toml: str, agent: float, verifier: float, build: float) -> None:
    settings = map_task_config(parse_task_config(toml), TimeoutMultipliers(**multipliers))
    assert (settings.agent_timeout, settings.verifier_timeout, settings.build_timeout) == (agent, verifier, build)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), 1e308])
def test_multipliers_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        TimeoutMultipliers(timeout=bad)


# -- the verifier's files, the sweep's leftovers ------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_collected_files() -> None:
    big_head, big_tail = b"h" * 10, b"t" * 10
    output = "\n".join([
        f"F {_b64(b'reward.txt')} 2 2 0", _b64(b"1\n"),
        f"F {_b64(b'sub/out.log')} 100 10 10", _b64(big_head + big_tail),
        f"F {_b64(b'empty')} 0 0 0", "",
        "X 3", ""])
    collected = parse_collected(output)
    assert list(collected.files) == ["reward.txt", "sub/out.log", "empty"]
    assert collected.content("reward.txt") == "1\n" and collected.content("empty") == ""
    log = collected.files["sub/out.log"]
    assert not log.whole and log.text() == "h" * 10 + "\n[... 80 bytes not kept ...]\n" + "t" * 10
    assert collected.notes == ["sub/out.log: 100 bytes, kept 20 (first and last)",
                               "3 more file(s) not kept (at most 64)"]
    with pytest.raises(RewardError, match="larger than"):
        collected.content("sub/out.log")
    assert collected.content("reward.json") is None


@pytest.mark.parametrize("output", ["F !!! 1 1 0\nAA==\n", "junk\n", f"F {_b64(b'a')} x 1 0\nAA==\n"])
def test_collected_malformed(output: str) -> None:
    collected = parse_collected(output)
    assert collected.files == {} and collected.notes == ["the listing of /logs/verifier was cut short"]


def test_sweep_leftovers() -> None:
    assert parse_left("\nleft 1000 57\nleft 1000 58\nleft 0 9\nleft  12\ngarbage\n") == {"1000": ["57", "58"],
                                                                                        "0": ["9"]}


# -- retries ---------------------------------------------------------------------------------------------


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise RuntimeError("the agent failed") from exc
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(("exc", "retried"), [
    (RuntimeError("Could not copy tests/ to /tests (exit 2)"), True),  # infrastructure: retried
    (ModelError("openai/x", "429 giving up after 5 retries", 5, retryable=True), True),
    (ModelError("openai/x", "401 invalid api key", 0, retryable=False), False),  # as Harbor's auth exclusion
    (_wrapped(ModelError("openai/x", "404 model not found", 0, retryable=False)), False),
    (_wrapped(OSError("connection reset")), True),
])
def test_retry_classification(exc: BaseException, retried: bool) -> None:
    assert harbor_retryable(exc) is retried
