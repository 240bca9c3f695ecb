"""``text_editor``: view / create / str_replace / insert / undo_edit on files in the sandbox.

Runs next to the sandbox using only ``read_file`` / ``write_file`` / ``exec``, so it works on every
driver. Undo history lives in the sandbox's tool state (the last ``UNDO_DEPTH`` versions per file).
Serial: edits to one file must apply in the order the model declared them.
"""

from __future__ import annotations

import asyncio
from typing import Literal, TypeVar

from orchestrator.tool._errors import ToolError
from orchestrator.tool._tool import Tool, tool
from orchestrator.util._sandbox import SandboxEnvironment, sandbox
from orchestrator.util._timers import arm

from ._common import tool_state, with_timeout_note

UNDO_DEPTH = 10
SNIPPET_LINES = 4
_DIR_EXIT = 100  # the view script's "this is a directory" code
_SPECIAL_EXIT = 101  # exists but is not a regular file (a device, fifo, socket): never read
_TOO_LARGE_EXIT = 102
MAX_FILE_BYTES = 16 * 1024 * 1024  # larger files are refused before they are read (the model sees 16 KiB anyway)
_VIEW_DIR = (
    'if [ -d "$1" ]; then find "$1" -maxdepth 2 -not -path "*/.*" 2>/dev/null | sort; exit 100; fi; '
    'if [ -f "$1" ]; then s=$(stat -L -c %s -- "$1" 2>/dev/null || echo 0); '
    f'[ "$s" -gt {MAX_FILE_BYTES} ] 2>/dev/null && exit {_TOO_LARGE_EXIT}; exit 0; fi; '
    'if [ -e "$1" ] || [ -L "$1" ]; then exit 101; fi; exit 2'
)


@tool
def text_editor(timeout: int | None = 180, user: str | None = None) -> Tool:
    """Custom editing tool for viewing, creating and editing files.

    Args:
      timeout: Seconds after which a command is abandoned.
      user: User to run file commands as (default: the sandbox's user).
    """

    async def execute(
        command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
        path: str,
        file_text: str | None = None,
        insert_line: int | None = None,
        new_str: str | None = None,
        old_str: str | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """Custom editing tool for viewing, creating and editing files.

        * State is persistent across command calls and discussions with the user.
        * If `path` is a file, `view` displays the result of applying `cat -n`. If `path` is a
          directory, `view` lists non-hidden files and directories up to 2 levels deep.
        * The `create` command cannot be used if the specified `path` already exists as a file.
        * If a `command` generates a long output, it will be truncated and marked with `<response clipped>`.
        * The `undo_edit` command will revert the last edit made to the file at `path`.

        Notes for using the `str_replace` command:
        * The `old_str` parameter should match EXACTLY one or more consecutive lines from the
          original file. Be mindful of whitespaces!
        * If the `old_str` parameter is not unique in the file, the replacement will not be
          performed. Make sure to include enough context in `old_str` to make it unique.
        * The `new_str` parameter should contain the edited lines that should replace the `old_str`.

        Args:
          command: The command to run: `view`, `create`, `str_replace`, `insert`, `undo_edit`.
          path: Absolute path to file or directory, e.g. `/repo/file.py` or `/repo`.
          file_text: Required for `create`: the content of the file to be created.
          insert_line: Required for `insert`: `new_str` is inserted AFTER this line (0 = at the top).
          new_str: For `str_replace`: the new string (omit to delete `old_str`). Required for `insert`.
          old_str: Required for `str_replace`: the string in `path` to replace.
          view_range: Optional for `view` of a file: [start, end] line numbers, 1-based and
            inclusive; `[start, -1]` shows from `start` to the end of the file.

        Returns:
          The result of the command.
        """
        _check_absolute(path)
        env = sandbox()
        editor = _Editor(env, user)
        async with asyncio.timeout(None) as scope:
            arm(scope, timeout)
            match command:
                case "view":
                    return await editor.view(path, view_range)
                case "create":
                    return await editor.create(path, _required(file_text, "file_text", command))
                case "str_replace":
                    return await editor.str_replace(path, _required(old_str, "old_str", command), new_str or "")
                case "insert":
                    line = _required(insert_line, "insert_line", command)
                    return await editor.insert(path, line, _required(new_str, "new_str", command))
                case "undo_edit":
                    return await editor.undo(path)
        raise ToolError(f"Unrecognized command '{command}'. Allowed: view, create, str_replace, insert, undo_edit.")

    return with_timeout_note(execute, timeout)


class _Missing(ToolError):
    """The path does not exist."""


def _check_absolute(path: str) -> None:
    """Inspect requires absolute paths: a relative one would depend on a cwd the model cannot see."""
    if not path.startswith("/"):
        suggestion = "/" + path.lstrip("./")
        raise ToolError(
            f"The path {path} is not an absolute path, it should start with `/`. Maybe you meant {suggestion}?"
        )


_V = TypeVar("_V")


def _required(value: _V | None, name: str, command: str) -> _V:
    if value is None:
        raise ToolError(f"Parameter `{name}` is required for command: {command}.")
    return value


def numbered(text: str, start: int = 1) -> str:
    """``cat -n`` style: the line number right-aligned in 6 columns, a tab, the line."""
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))


class _Editor:
    def __init__(self, env: SandboxEnvironment, user: str | None) -> None:
        self.env = env
        self.user = user
        self.history: dict[str, list[str]] = tool_state(env, "text_editor.history")

    async def _read(self, path: str) -> str:
        if self.user is None:
            return await self.env.read_file(path)
        result = await self.env.exec(["cat", "--", path], user=self.user)
        if not result.success:
            raise ToolError(result.stderr.strip() or f"Could not read {path}.")
        if result.truncated:  # editing a partial read would write the file back cut short
            raise ToolError(f"The file {path} is too large for the editor (over the sandbox's output cap).")
        return result.stdout

    async def _write(self, path: str, text: str) -> None:
        if self.user is None:
            await self.env.write_file(path, text)
            return
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        result = await self.env.exec(["sh", "-c", script, "sh", path], input=text, user=self.user)
        if not result.success:
            raise ToolError(result.stderr.strip() or f"Could not write {path}.")

    async def _is_dir(self, path: str) -> tuple[bool, str]:
        result = await self.env.exec(["sh", "-c", _VIEW_DIR, "sh", path], user=self.user)
        if result.returncode == 2:
            raise _Missing(f"The path {path} does not exist. Please provide a valid path.")
        if result.returncode == _TOO_LARGE_EXIT:
            raise ToolError(f"The file {path} is too large for the editor (over {MAX_FILE_BYTES // (1 << 20)} MiB).")
        if result.returncode == _SPECIAL_EXIT:
            raise ToolError(f"The path {path} is not a regular file or directory (e.g. a device or a pipe): "
                            "the editor only works on regular files.")
        return result.returncode == _DIR_EXIT, result.stdout

    async def view(self, path: str, view_range: list[int] | None) -> str:
        is_dir, listing = await self._is_dir(path)
        if is_dir:
            if view_range:
                raise ToolError("The `view_range` parameter is not allowed when `path` points to a directory.")
            return (
                f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n{listing}"
            )
        text = await self._read(path)
        text = text[:-1] if text.endswith("\n") else text  # a final newline ends the last line
        start = 1
        if view_range:
            lines = text.split("\n")
            start, end = _check_range(view_range, len(lines))
            text = "\n".join(lines[start - 1 :] if end == -1 else lines[start - 1 : end])
        return f"Here's the result of running `cat -n` on {path}:\n{numbered(text, start)}\n"

    async def create(self, path: str, file_text: str) -> str:
        is_dir, _ = await self._is_dir_or_missing(path)
        if is_dir is None:
            raise ToolError(f"File already exists at: {path}. Cannot overwrite files using command `create`.")
        if is_dir:
            raise ToolError(f"The path {path} is a directory. Cannot create a file there.")
        await self._write(path, file_text)
        self._remember(path, None)
        return f"File created successfully at: {path}"

    async def _is_dir_or_missing(self, path: str) -> tuple[bool | None, str]:
        """(True, _) directory; (False, _) missing; (None, _) an existing file (a special file: ToolError)."""
        try:
            is_dir, listing = await self._is_dir(path)
        except _Missing:
            return False, ""
        return (True if is_dir else None), listing

    async def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        text = await self._read_file(path)
        count = text.count(old_str) if old_str else 0
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}.")
        if count > 1:
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if old_str.split("\n")[0] in line]
            raise ToolError(
                f"No replacement was performed. Found {count} occurrences of old_str `{old_str}` in {path}"
                f" (lines {lines}); it must appear exactly once. Include more context to make it unique."
            )
        new_text = text.replace(old_str, new_str, 1)
        await self._write(path, new_text)
        self._remember(path, text)
        first = text.split(old_str)[0].count("\n")
        return self._edited(path, new_text, first, first + new_str.count("\n"))

    async def insert(self, path: str, insert_line: int, new_str: str) -> str:
        text = await self._read_file(path)
        body, final_nl = (text[:-1], "\n") if text.endswith("\n") else (text, "")
        lines = body.split("\n") if body else []
        if insert_line < 0 or insert_line > len(lines):
            raise ToolError(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines"
                f" of the file: [0, {len(lines)}]"
            )
        new_lines = new_str.split("\n")
        new_text = "\n".join(lines[:insert_line] + new_lines + lines[insert_line:]) + final_nl
        await self._write(path, new_text)
        self._remember(path, text)
        return self._edited(path, new_text, insert_line, insert_line + len(new_lines) - 1)

    async def undo(self, path: str) -> str:
        versions = self.history.get(path)
        if not versions:
            raise ToolError(f"No edit history found for {path}.")
        previous = versions.pop()
        if previous is None:  # the last edit created the file: undo removes it
            result = await self.env.exec(["rm", "-f", "--", path], user=self.user)
            if not result.success:
                raise ToolError(result.stderr.strip())
            return f"Last edit to {path} undone successfully (the file created by it was removed)."
        await self._write(path, previous)
        return f"Last edit to {path} undone successfully. {self._snippet_text(path, previous)}"

    async def _read_file(self, path: str) -> str:
        is_dir, _ = await self._is_dir(path)
        if is_dir:
            raise ToolError(f"The path {path} is a directory and only the `view` command can be used on directories.")
        return await self._read(path)

    def _remember(self, path: str, previous: str | None) -> None:
        versions = self.history.setdefault(path, [])
        versions.append(previous)  # type: ignore[arg-type]  # None marks "did not exist" for undo
        del versions[:-UNDO_DEPTH]

    def _edited(self, path: str, text: str, first: int, last: int) -> str:
        lines = (text[:-1] if text.endswith("\n") else text).split("\n")
        start = max(0, first - SNIPPET_LINES)
        end = min(len(lines), last + SNIPPET_LINES + 1)
        snippet = numbered("\n".join(lines[start:end]), start + 1)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
            f"{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
        )

    def _snippet_text(self, path: str, text: str) -> str:
        text = text[:-1] if text.endswith("\n") else text
        return f"Here's the result of running `cat -n` on {path}:\n{numbered(text)}\n"


def _check_range(view_range: list[int], n_lines: int) -> tuple[int, int]:
    if len(view_range) != 2 or not all(isinstance(i, int) for i in view_range):
        raise ToolError("Invalid `view_range`. It should be a list of two integers.")
    start, end = view_range
    if start < 1 or start > n_lines:
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its first element `{start}` should be within the range"
            f" of lines of the file: [1, {n_lines}]"
        )
    if end != -1 and (end < start or end > n_lines):
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its second element `{end}` should be -1 or within"
            f" [{start}, {n_lines}]"
        )
    return start, end
