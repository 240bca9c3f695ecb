"""Warm spares for the python tool's command: identical to a cold spawn (parametrised: local + docker).

Each case runs the same code cold (``warm_spares = 0``) and warm, and compares whole results.
``_warm_pids`` proves the warm path was taken: a spare is spawned before the call is issued.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from orchestrator.util import ExecResult, SandboxTimeoutError
from tests.support.waits import until

pytestmark = pytest.mark.timeout(180)

PY = ["bash", "--login", "-c", "python3 -"]  # the python tool's exact form

# Run in the sandbox: the idle spares of an agent (`python3 -` children of it), with the cwd and
# environment each was started for (a spare serves only calls of its own cwd and env).
SPARES = r"""
import json, os, sys
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")[:-1]
        if ppid != int(sys.argv[1]) or argv != [b"python3", b"-"]:
            continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.decode(errors="replace").split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
        found.append({"pid": int(pid), "cwd": os.readlink(f"/proc/{pid}/cwd"), "env": env})
    except (OSError, ValueError, IndexError):
        continue  # gone meanwhile
print(json.dumps(found))
"""


async def _spares(env) -> list[dict]:
    spares, env.warm_spares = env.warm_spares, 0  # this look must not start spares of its own
    try:
        out = await env.exec(["python3", "-c", SPARES, str(env._channels[None].info["pid"])], timeout=30)
    finally:
        env.warm_spares = spares
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def _spare_pids(env) -> set[int]:
    """Pids of this sandbox's idle spares: `python3 -` children of its (default user's) agent."""
    return {spare["pid"] for spare in await _spares(env)}


async def _settle(env, n: int | None = None, cwd: str | None = None, vars: dict[str, str] | None = None) -> set[int]:
    """Wait (bounded) until the agent holds ``n`` (default: its ``warm_spares``) idle spares for calls
    of this cwd and environment (any, when not given): spares start once the agent is idle."""
    n = env.warm_spares if n is None else n

    async def ready() -> set[int] | None:
        pids = {s["pid"] for s in await _spares(env) if (cwd is None or s["cwd"] == cwd)
                and all(s["env"].get(k) == v for k, v in (vars or {}).items())}
        return pids if len(pids) >= n else None

    return await until(ready, f"{n} warm spare(s) for cwd={cwd} env={vars}", timeout=60, interval=0.1)


async def _cold_and_warm(box, code: str, **kw):
    box.warm_spares = 0
    cold = await box.exec(PY, input=code, **kw)
    box.warm_spares = 2
    await box.exec(PY, input="pass", **kw)  # first call with this (cwd, env): spares start after it
    await _settle(box, cwd=kw.get("cwd"), vars=kw.get("env"))
    warm = await box.exec(PY, input=code, **kw)
    return cold, warm


CASES = [
    "print('out'); import sys; print('err', file=sys.stderr)",
    "import sys; print(sys.argv, sys.orig_argv, __name__, sorted(globals()))",
    "import sys; print(sorted(m for m in sys.modules))",
    "1/0",
    "def f(:\n",
    "raise SystemExit(3)",
    "import sys; sys.exit('bye')",
    "import os; os.kill(os.getpid(), 9)",
    "import sys; print(repr(sys.stdin.read()))",
    "import os; print(os.getpid() == os.getsid(0), os.getpgrp() == os.getpid())",
    "import os; print(sorted(os.listdir('/proc/self/fd')))",
    "import atexit; atexit.register(print, 'at exit')\nclass A:\n    def __del__(self): print('del')\na = A()",
    "# -*- coding: latin-1 -*-\nprint('\xe9')",
    "import sys, traceback\ntry:\n    1/0\nexcept Exception:\n    traceback.print_exc()",
    "import os; print(os.environ.get('SHLVL'), os.environ.get('_'), os.getcwd())",
]


@pytest.mark.parametrize("code", CASES)
async def test_warm_matches_cold(env, code):
    cold, warm = await _cold_and_warm(env, code)
    assert warm == cold


async def test_the_warm_path_is_taken_and_every_call_is_a_fresh_process(env):
    await env.exec(PY, input="pass")
    await _settle(env)
    spares = await _spare_pids(env)
    assert len(spares) == 2
    got = await env.exec(PY, input="import os; print(os.getpid())")
    pid = int(got.stdout)
    assert pid in spares  # the call ran in a pre-started process...
    later = await until(lambda: _replaced(env, pid), "the used spare to be replaced")
    assert pid not in later and len(later) == 2  # ...which is gone, and was replaced
    # No state leaks: each call is a new interpreter.
    await env.exec(PY, input="import builtins; builtins.leak = 1")
    assert (await env.exec(PY, input="import builtins; print(hasattr(builtins, 'leak'))")).stdout == "False\n"


async def test_cwd_and_env_are_the_calls(env):
    home = (await env.exec(["pwd"])).stdout.strip()
    await env.exec(["mkdir", "-p", "wd"])
    code = "import os; print(os.getcwd(), os.environ.get('A'))"
    for kw in ({"cwd": f"{home}/wd"}, {"env": {"A": "1"}}, {"env": {"A": "2"}, "cwd": f"{home}/wd"}):
        cold, warm = await _cold_and_warm(env, code, **kw)
        assert warm == cold
    assert (await env.exec(PY, input=code, env={"A": "3"})).stdout == f"{home} 3\n"


async def test_timeout_keeps_partial_output_on_the_warm_path(env):
    await env.exec(PY, input="pass")
    await _settle(env)
    with pytest.raises(SandboxTimeoutError) as info:
        await env.exec(PY, input="import time, sys\nprint('partial', flush=True)\ntime.sleep(1000)", timeout=1)
    assert info.value.stdout == "partial\n"


async def test_startup_inputs_changed_after_a_spare_started_are_seen(env):
    """A new user site (e.g. `pip install --user`) appears after the spares started: not stale."""
    await env.exec(PY, input="pass")
    await _settle(env)
    site = (await env.exec(PY, input="import site; print(site.getusersitepackages())")).stdout.strip()
    await _settle(env)
    assert (await env.exec(["mkdir", "-p", site])).returncode == 0
    await env.exec(["sh", "-c", f"echo 'X = 42' > '{site}/tf_warm_mod.py'"])
    try:
        got = await env.exec(PY, input="import tf_warm_mod; print(tf_warm_mod.X)")
        assert got.stdout == "42\n", got.stderr
    finally:
        await env.exec(["rm", "-f", f"{site}/tf_warm_mod.py"])


async def test_killed_spares_fall_back_to_a_cold_spawn(env):
    await env.exec(PY, input="pass")
    await _settle(env)
    for pid in await _spare_pids(env):
        await env.exec(["kill", "-9", str(pid)])
    fine = ExecResult(returncode=0, stdout="fine\n", stderr="", truncated=False)
    got = await env.exec(PY, input="print('fine')")
    assert got == fine, got  # 137 and no output: the call went to a killed spare and was not run cold


async def test_other_commands_stay_cold(env):
    await env.exec(["bash", "--login", "-c", "python3 -"], input="pass")
    await _settle(env)
    before = await _spare_pids(env)
    # Not the tool's form (no input / another argv): spawned cold, spares untouched.
    assert (await env.exec(["bash", "--login", "-c", "python3 -"])).returncode == 0
    assert (await env.exec(["python3", "-"], input="print(2)")).stdout == "2\n"
    assert await _spare_pids(env) == before


FILL = """
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.closerange(0, 256)  # let the call finish; the child only holds a pid
        time.sleep(1000)
        os._exit(0)
    n += 1
print(n)
"""


@pytest.mark.docker
async def test_an_exhausted_pids_limit_never_breaks_a_call(sandbox_factory):
    env = await sandbox_factory("docker", pids_limit=40)
    await env.exec(PY, input="pass")
    await _settle(env)
    assert len(await _spare_pids(env)) == 2
    env.warm_spares = 0  # the spares stay (for their key); new calls start none
    filled = await env.exec(["python3", "-c", FILL], timeout=60)
    assert int(filled.stdout) > 0
    # The filler's own pid is free again: take it with a long-running call, so none is left. It is
    # seen from outside (Docker lists the container's processes): inside, no pid is left to look.
    hog = asyncio.ensure_future(env.exec(["sleep", "1000.81"], timeout=120))
    try:
        await until(lambda: asyncio.to_thread(_docker_runs, env, "sleep 1000.81"), "the hog to be running")
        result = await env.exec(["sh", "-c", "echo spawned"], timeout=30)
        assert result.returncode == 0 and result.stdout == "spawned\n", result
    finally:
        hog.cancel()
        await asyncio.gather(hog, return_exceptions=True)


async def test_warm_spares_are_configurable_and_zero_disables(env, sandbox_factory):
    assert env.warm_spares == 2  # the config default
    kind = "docker" if "docker" in type(env).__name__.lower() else "local"
    boxes = {n: await sandbox_factory(kind, warm_spares=n) for n in (0, 1)}
    for n, box in boxes.items():
        assert box.warm_spares == n
        await box.exec(PY, input="pass")  # the box with none first: it has had longer to start any
    assert len(await _settle(boxes[1])) == 1  # the same call made the other start its one spare ...
    assert await _spare_pids(boxes[0]) == set()  # ... and this one, none


async def _replaced(env, used: int) -> set[int] | None:
    """The spares once the one a call used is gone and another has taken its place."""
    pids = await _spare_pids(env)
    return pids if used not in pids and len(pids) == env.warm_spares else None


def _docker_runs(env, command: str) -> bool:
    """Whether Docker lists ``command`` among the sandbox container's processes (docker top)."""
    import docker

    client = docker.from_env()
    try:
        top = client.api.top(env.container_id)
    finally:
        client.close()
    column = top["Titles"].index("CMD")
    return any(row[column] == command for row in top["Processes"])
