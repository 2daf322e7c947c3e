"""One readable line per audit entry: time, who, field, old → new (values summarised, not dumped).

The record keeps every audit value in full as compact JSON; an auditor reads this line and goes
to the record (or the JSON export) only for a value it summarises.
"""

from __future__ import annotations

import json
from typing import Any, Final

MAX_VALUE_CHARS: Final[int] = 60


def value_text(compact_json: str) -> str:
    """A stored audit value in a few words: text as is, numbers, "(none)", "[3 items]"."""
    try:
        value: Any = json.loads(compact_json)
    except ValueError:
        value = compact_json
    if value is None:
        text = "(none)"
    elif isinstance(value, str):
        text = value if value else '""'
    elif isinstance(value, bool | int | float):
        text = json.dumps(value)
    elif isinstance(value, list):
        text = f"[{len(value)} item{'' if len(value) == 1 else 's'}]"
    else:
        keys = sorted(value)
        shown = ", ".join(keys[:4]) + (", …" if len(keys) > 4 else "")
        text = f"{{{shown}}}"
    text = " ".join(text.split())  # newlines and runs of spaces: one space
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + f"… ({len(text)} chars)"
    return text


def audit_line(at: str, actor: str, field: str, old: str, new: str) -> str:
    """ "2026-12-01 14:22:04  oncall  status: declared → paired" """
    when = at.replace("T", " ").removesuffix("+00:00")
    return f"{when}  {actor}  {field}: {value_text(old)} → {value_text(new)}"
