"""Text from models, sandboxes and datasets, made safe to print on a terminal (pure; table-tested).

Tool output is whatever a sandboxed program printed, and a model can write anything: printed raw, an
OSC sequence retitles the window or writes the clipboard (OSC 52), CSI clears the screen or moves
the cursor over earlier lines, and bidi overrides make text read differently than it is. Every CLI
path that prints such text (``log show``, ``log dump`` to a terminal, the live display, the approval
and review consoles, one-line errors) passes it through ``terminal_safe``:

* C0 controls other than newline and tab (ESC, BEL, backspace, carriage return, ...), DEL, the C1
  controls (U+0080–U+009F: 8-bit CSI/OSC/DCS) and the bidi embedding/override/isolate marks become
  a visible ``\\xNN`` / ``\\uNNNN`` (so a reader sees that they were there);
* everything else, including newlines (``keep_newlines=False`` escapes those too) and all printable
  Unicode, is unchanged.

``json_terminal_safe`` does the same for JSON text with escapes JSON itself reads back (``\\u009b``),
so ``log dump`` stays valid JSON with the same meaning.
"""

from __future__ import annotations

__all__ = ["json_terminal_safe", "terminal_safe"]

_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_UNSAFE = [c for c in range(0x20) if c not in (0x09, 0x0A)] + [0x7F, *range(0x80, 0xA0), *_BIDI]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {c: _escape(c) for c in _UNSAFE}
_TABLE_ONE_LINE = {**_TABLE, 0x0A: "\\n"}
_JSON_TABLE = {c: f"\\u{c:04x}" for c in _UNSAFE}


def terminal_safe(text: object, keep_newlines: bool = True) -> str:
    """``text`` with every terminal control sequence made visible and inert (see module doc)."""
    return str(text).translate(_TABLE if keep_newlines else _TABLE_ONE_LINE)


def json_terminal_safe(text: str) -> str:
    """JSON text made terminal-safe with JSON's own escapes (control characters only occur inside
    strings, where ``\\uNNNN`` means the same character): still valid JSON, same value."""
    return text.translate(_JSON_TABLE)
