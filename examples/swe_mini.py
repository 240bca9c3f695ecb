"""A SWE-style benchmark in miniature: per-sample images, ``files``, ``setup``, a failing test, a fix.

Every sample is a tiny Python repository with a bug. Its image (``toolfleet/swe-mini-<name>``) is built
FROM the sandbox image with the repository at ``/home/sandbox/repo`` as a git checkout (no network, no
registry: ``examples/swe_mini/build_images.sh``). The sample then brings, in ``files``, the issue's text
(inline) and the failing test (a local file, ``examples/swe_mini/issues/<name>.py``); ``setup`` checks
the test really fails before the agent starts. The agent edits the code; the scorer runs the whole
test suite in the sample's sandbox (``sandbox_test``): correct when it exits 0.

    sh examples/swe_mini/build_images.sh                       # once per Docker host (about 20 s an image)
    toolfleet eval examples/swe_mini.py --model scripted/fixer --sandbox docker       # embedded: all pass
    toolfleet eval examples/swe_mini.py --model scripted/noop --sandbox docker        # all fail
    export TOOLFLEET_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')  # same on every process
    toolfleet worker --broker redis://localhost:6379/0 --hostname w1 --slots 3 &
    toolfleet worker --broker redis://localhost:6379/0 --hostname w2 --slots 3 &
    toolfleet eval examples/swe_mini.py --model scripted/fixer --broker redis://localhost:6379/0
    toolfleet bench swe --json                                 # the same on 2 workers, with container counts
    toolfleet eval examples/swe_mini.py --model openai/gpt-4o-mini --sandbox docker  # a real model

Task arguments (``-T``): ``images=false`` sends each repository as a directory in ``files`` instead
(runs in a ``local`` sandbox, no Docker needed); ``copies=N`` repeats every sample N times (the
``toolfleet bench swe`` workload); ``names=calc,leap`` picks repositories.

Scripted policies (``--model scripted/<name>``), so the eval runs with no model API: ``fixer`` reads
the issue, applies the known fix with ``text_editor``, runs the tests with ``bash``, submits; ``noop``
only runs the tests and submits.

Per-sample sandboxes: a sample's ``sandbox`` dict overrides the task's (and ``--sandbox``). Here each
is ``{"type": "docker", "image": "toolfleet/swe-mini-<name>:latest", "pool_size": 0}``; ``pool_size: 0``
because an image used by one sample gains nothing from pre-started spares. The ``api`` sample's adds
``services``: a second container (a price service its client queries at http://api:8080), see SERVICES.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.agent import as_solver, react
from orchestrator.dataset import MemoryDataset, Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.scorer import CORRECT, INCORRECT, Score, accuracy, sandbox_test, scorer, stderr
from orchestrator.solver import sample_state
from orchestrator.tool import bash, text_editor
from orchestrator.util import sandbox

HERE = Path(__file__).resolve().parent / "swe_mini"
REPO_DIR = "repo"  # relative to the sandbox's working directory (/home/sandbox in the sandbox image)
IMAGE = "toolfleet/swe-mini-{name}:latest"
TEST_COMMAND = f"cd {REPO_DIR} && python3 -m unittest -q 2>&1"

# name -> (issue text, file to fix, the buggy line, the fixed line). The fix is what the scripted
# ``fixer`` policy applies; a real model has to find it from the issue and the failing test.
PROBLEMS: dict[str, tuple[str, str, str, str]] = {
    "calc": ("mean([1, 2, 3]) returns 3.0 instead of 2.", "stats.py",
             "return total(xs) / (len(xs) - 1)", "return total(xs) / len(xs)"),
    "slug": ("slugify('Hello Big World') keeps the capitals; slugs must be lowercase.", "textutil.py",
             'return "-".join(words(title))', 'return "-".join(words(title.lower()))'),
    "leap": ("is_leap(1900) is True, but 1900 was not a leap year (centuries need % 400).",
             "calendar_rules.py", "return year % 4 == 0",
             "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)"),
    "stack": ("Stack.pop() returns the oldest item; it must return the most recent one.", "stack.py",
              "return self.items.pop(0)", "return self.items.pop()"),
    "clamp": ("clamp(5, 0, 10) returns 10; it should return 5.", "numeric.py",
              "return max(hi, min(lo, x))", "return max(lo, min(hi, x))"),
    "api": ("total(['apple', 'pear']) returns 75 cents; the price service says 120 + 75 = 195.", "shop.py",
            "return sum(price(item) for item in items[1:])", "return sum(price(item) for item in items)"),
}

INSTRUCTIONS = f"""You are fixing a bug in the Python repository in `{REPO_DIR}/` (a git checkout).
The issue is in `{REPO_DIR}/ISSUE.md`; `{REPO_DIR}/tests/test_issue.py` reproduces it and fails now.
Find and fix the bug in the code (do not edit the tests), run `{TEST_COMMAND}` until every test passes,
then call submit() with a one-line summary of the fix."""

# ``setup`` runs once, after ``files`` are in place, as the sandbox user in its working directory:
# here it commits the new test (so `git diff` shows only the agent's change) and checks the test
# fails, so a broken sample fails loudly at setup instead of scoring as solved.
SETUP = f"""cd {REPO_DIR}
git add -A && git -c user.name=swe-mini -c user.email=swe-mini@localhost commit -q -m "failing test"
if python3 -m unittest -q tests.test_issue >/dev/null 2>&1; then
    echo "tests/test_issue.py already passes: the sample is broken" >&2; exit 1
fi
"""
SETUP_WITHOUT_GIT = f"""cd {REPO_DIR}
if python3 -m unittest -q tests.test_issue >/dev/null 2>&1; then
    echo "tests/test_issue.py already passes: the sample is broken" >&2; exit 1
fi
"""


def make_sample(name: str, copy: int = 0, images: bool = True) -> Sample:
    issue, path, buggy, fixed = PROBLEMS[name]
    files: dict[str, Any] = {
        f"{REPO_DIR}/ISSUE.md": f"# Bug: {name}\n\n{issue}\n",  # inline text
        f"{REPO_DIR}/tests/test_issue.py": str(HERE / "issues" / f"{name}.py"),  # a local file
    }
    if not images:
        files[REPO_DIR] = HERE / "repos" / name  # a local directory: the whole repository
    return Sample(
        id=f"{name}-{copy}" if copy else name,
        input=f"Fix this issue:\n\n{issue}",
        target=fixed,
        metadata={"repo": name, "path": f"{REPO_DIR}/{path}", "buggy": buggy, "fixed": fixed,
                  "services": list(SERVICES.get(name, {}))},
        files=files,
        setup=SETUP if images else SETUP_WITHOUT_GIT,
        sandbox={"type": "docker", "image": IMAGE.format(name=name), "pool_size": 0,
                 "services": SERVICES.get(name, {})} if images else None,
    )


# The "api" sample's sandbox has two containers, as compose runs them: the agent's box, where tools
# run, and the price service its client queries as http://api:8080 (each in its own namespace on the
# sandbox's own network, no route out), and the sample starts only once the service's healthcheck
# passes. Its scorer also reads the service's request log with sandbox("api").
SERVICE_LOG = "/tmp/requests.log"
SERVICES: dict[str, dict[str, Any]] = {
    "api": {"api": {
        "image": "toolfleet/swe-mini-api-server:latest",
        "healthcheck": {"test": ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health')"],
                        "interval": 0.25, "retries": 40},
    }},
}


@task
def swe_mini(images: bool = True, copies: int = 1, names: str = "", message_limit: int = 20) -> Task:
    chosen = [n.strip() for n in names.split(",") if n.strip()] or list(PROBLEMS)
    unknown = [n for n in chosen if n not in PROBLEMS]
    if unknown:
        raise ValueError(f"unknown swe_mini repositories {unknown} (have: {', '.join(PROBLEMS)})")
    if not images:  # a local sandbox is one directory: the multi-service samples need docker
        chosen = [n for n in chosen if n not in SERVICES]
    samples = [make_sample(name, copy, images) for copy in range(copies) for name in chosen]
    agent = react(prompt=INSTRUCTIONS, tools=[bash(timeout=60), text_editor()])
    return Task(
        dataset=MemoryDataset(samples, name="swe_mini", location=str(HERE)),
        solver=as_solver(agent),
        scorer=tests_pass(),
        sandbox="docker" if images else "local",
        message_limit=message_limit,
    )


@scorer(metrics=[accuracy(), stderr()])
def tests_pass() -> Any:
    """Correct when the repository's whole test suite passes in the sample's sandbox, and, for a sample
    with services, each service saw the client's requests (read from its container: ``sandbox(name)``)."""
    run_tests = sandbox_test(TEST_COMMAND, timeout=60)

    async def score(state: Any, target: Any) -> Score:
        result = await run_tests(state, target)
        for service in state.metadata.get("services", []):
            try:
                requests = await sandbox(service).read_file(SERVICE_LOG)
            except FileNotFoundError:
                requests = ""
            if result.value == CORRECT and "GET /price/" not in requests:
                return Score(value=INCORRECT, answer=result.answer,
                             explanation=f"the tests passed without asking the {service!r} service")
        return result

    return score


# -- scripted policies ---------------------------------------------------------------------------


def _turn(messages: list[Any], fix: bool) -> ModelOutput:
    """One step per turn, decided by how many tool results the sample has so far."""
    state = sample_state()
    assert state is not None, "swe_mini's scripted policies run inside an eval sample"
    results = [m for m in messages if isinstance(m, ChatMessageTool)]
    plan = ["look", "edit", "test"] if fix else ["look", "test"]
    if len(results) >= len(plan):
        return ModelOutput.for_tool_call("scripted", "submit", {"answer": "Fixed." if fix else "Left as is."})
    step = plan[len(results)]
    if step == "look":  # where the repository is (text_editor wants absolute paths), the issue, the tests
        return ModelOutput.for_tool_call("scripted", "bash",
                                         {"cmd": f"pwd -P && cat {REPO_DIR}/ISSUE.md && {TEST_COMMAND}"})
    if step == "edit":
        meta = state.metadata
        workdir = results[0].text.splitlines()[0].strip()
        return ModelOutput.for_tool_call("scripted", "text_editor", {
            "command": "str_replace", "path": f"{workdir}/{meta['path']}", "old_str": meta["buggy"],
            "new_str": meta["fixed"]})
    return ModelOutput.for_tool_call("scripted", "bash", {"cmd": TEST_COMMAND})


@scripted_policy("fixer")
def fixer(messages: list[Any], tools: list[Any]) -> ModelOutput:
    return _turn(messages, fix=True)


@scripted_policy("noop")
def noop(messages: list[Any], tools: list[Any]) -> ModelOutput:
    return _turn(messages, fix=False)
