"""Text from records and traces made safe to print: control characters shown escaped, never sent.

A run label, tag, trace name or incident field may hold ESC sequences, carriage returns or
bidirectional overrides; printed raw they would recolour, move the cursor or hide what a line
says. Every CLI output (and the app's error texts) goes through these functions; the app
(workbench/tui) shows labels, tags and incident fields through for_terminal too.
"""

from __future__ import annotations

import re
from typing import Any, Final, TextIO

# C0 controls, DEL, C1 controls, line/paragraph separators and the bidi embeddings, overrides
# and isolates: the code points that change how a terminal draws the text instead of showing.
_CONTROLS: Final[re.Pattern[str]] = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_CONTROLS_BUT_NEWLINE: Final[re.Pattern[str]] = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED: Final[dict[str, str]] = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _escape_json(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def for_terminal(text: object) -> str:
    """One field as printable text: every control character (newlines too) shown escaped."""
    return _CONTROLS.sub(_escape, str(text))


def stream_for_terminal(text: str) -> str:
    """Whole output (a report, a JSON document, a Markdown export): newlines kept, every other
    control written as a \\u escape, which reads as text and keeps a JSON document's value
    (JSON encoders leave DEL, C1 and bidi controls raw inside strings)."""
    return _CONTROLS_BUT_NEWLINE.sub(_escape_json, text)


class TerminalSafeWriter:
    """A stdout stand-in that passes every write through stream_for_terminal: the catch-all
    behind the per-field for_terminal, so no command can send a control sequence."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(stream_for_terminal(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self._target, name)
