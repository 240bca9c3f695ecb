"""``bash(background=True)``: tell the model how to run long commands without blocking a call.

As in Inspect, the option changes only what the model reads: each call is still one fresh shell, and
what a command leaves running in the background keeps running between calls, because the exec agent
returns once the shell has exited (after a short grace for output still in flight; see
``EXIT_GRACE`` in the agent) and kills a command's process group only on a timeout or a cancel. So
a long build or server is started detached with its output sent to a file, and later calls poll it.
"""

from __future__ import annotations

from typing import TypeVar

from orchestrator.tool._registry import TOOL_META_ATTR, ToolMeta

T = TypeVar("T")


def background_description(timeout: float | None) -> str:
    """The model-facing description of ``bash`` when long-running work should go to the background."""
    lines = ["Use this function to execute bash commands."]
    if timeout is not None:
        shown = int(timeout) if float(timeout).is_integer() else timeout
        lines += ["", (f"A command that runs longer than {shown} seconds is killed. Start anything that may take "
                       "longer (a build, a download, a test suite, a server) in the background and check on it in "
                       "later calls; sleeping until it finishes would be killed too.")]
    else:
        lines += ["", ("Start long-running work (a build, a download, a test suite, a server) in the background "
                       "and check on it in later calls, so this call returns and you can keep working.")]
    lines += [
        "",
        ("Start it detached, with its output in a file, and print its PID in the same call ($! only "
         "exists in the shell that started it):"),
        "",
        "  nohup <command> > /tmp/job.log 2>&1 &",
        "  echo \"PID $!\"",
        "",
        ("Every call runs in a new shell, but the background process keeps running. Later calls can "
         "check on it:"),
        "",
        "  kill -0 <PID> && echo running   # still running?",
        "  tail -n 50 /tmp/job.log         # its latest output",
    ]
    return "\n".join(lines)


def with_background_note(execute: T, timeout: float | None) -> T:
    """Give this tool instance the background guidance as its description (the parameters stay)."""
    setattr(execute, TOOL_META_ATTR, ToolMeta(name=execute.__name__, ref=None,  # type: ignore[attr-defined]  # the tool function has a __name__
                                              description=background_description(timeout)))
    return execute
