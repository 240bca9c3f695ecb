"""Task file for tests/eval/test_multi_service_eval.py: a sample whose sandbox is several containers
(``pod_compose.yaml``, Inspect's compose form), toured by a scripted policy and checked by a scorer
that uses ``sandbox("web")`` (``--model scripted/pod_tour``).

Importable as a module too (``--import tests.eval.tasks.pod``), so a worker can hold ``service_exec``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.scorer import CORRECT, INCORRECT, Score, Target, scorer
from orchestrator.solver import TaskState, generate, use_tools
from orchestrator.tool import bash, tool
from orchestrator.util import sandbox

COMPOSE = Path(__file__).resolve().parent / "pod_compose.yaml"
FETCH = "python3 -c \"import urllib.request as u; print(u.urlopen('http://web:8080/hello.txt').read().decode().strip())\""
# Loopback and the pod's own network only, and no route anywhere else (10.255.255.1 is a private address nobody has).
ISOLATION = ("grep -c : /proc/net/dev; python3 -c \"import socket; s = socket.socket(); s.settimeout(3)\n"
             "try:\n    s.connect(('10.255.255.1', 80))\nexcept OSError as e:\n    print('blocked:', e)\"")


@tool
def service_exec():
    async def execute(service: str, cmd: str) -> str:
        """Run a shell command in one named container of the sample's sandbox.

        Args:
            service: The container's name (e.g. web).
            cmd: The command.
        """
        result = await sandbox(service).exec(["sh", "-c", cmd])
        return f"{result.returncode}:{result.stdout.strip()}"

    return execute


STEPS: list[tuple[str, dict[str, Any]]] = [
    ("bash", {"cmd": FETCH}),  # the default container reaches the web service by name
    ("service_exec", {"service": "web", "cmd": "cat /tmp/hello.txt; echo $ROLE; hostname"}),
    ("service_exec", {"service": "sidecar", "cmd": "echo $ROLE; id -un"}),
    ("service_exec", {"service": "default", "cmd": "echo in-default > /tmp/mark; cat /tmp/mark"}),
    ("bash", {"cmd": ISOLATION}),
]


@scripted_policy("pod_tour")
def tour(messages: list[Any], tools: list[Any]) -> ModelOutput:
    done = len([m for m in messages if isinstance(m, ChatMessageTool)])
    if done >= len(STEPS):
        return ModelOutput.from_content("scripted", "done")
    name, arguments = STEPS[done]
    return ModelOutput.for_tool_call("scripted", name, arguments)


@scorer(metrics=[])
def reads_services() -> Any:
    """An Inspect-style scorer reaching each container by name."""

    async def score(state: TaskState, target: Target) -> Score:
        web = await sandbox("web").read_file("/tmp/hello.txt")
        mark = await sandbox("default").read_file("/tmp/mark")
        same = await sandbox().read_file("/tmp/mark")
        try:
            sandbox("nope")
            unknown = "no error"
        except ValueError as exc:
            unknown = str(exc)
        ok = web == "hello-from-web\n" and mark == same == "in-default\n" and "sidecar" in unknown
        return Score(value=CORRECT if ok else INCORRECT, explanation=f"{web!r} {mark!r} {unknown}")

    return score


@task
def pod(compose: str = "pod_compose.yaml", per_sample: bool = False) -> Task:
    """``per_sample``: the sample carries the compose pair (Inspect allows both places)."""
    spec = ("docker", compose)
    return Task(
        dataset=[Sample(input="tour the pod", target="done", id="pod", sandbox=spec if per_sample else None)],
        solver=[use_tools(bash(), service_exec()), generate()],
        scorer=reads_services(),
        sandbox=None if per_sample else spec,
    )
