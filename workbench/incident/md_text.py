"""Record and trace text made safe in Markdown (escapes, code spans) and the tables the
exported summary is made of."""

from __future__ import annotations

import json
import re
from typing import Any

# Markup characters anywhere in a line, backslash-escaped (CommonMark escapes any ASCII
# punctuation; "\<" cannot open HTML). Underscores only at a word's edge (GFM never emphasises
# inside a word: compiler_version stays readable in the raw file), "]" only where it would close
# a link ("](", "][", "]:"), so intervals such as [1.2 ms, 2.6 ms] read as written.
_MD_SPECIAL = re.compile(r"[\\`*|~#<&]|\](?=[(\[:])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# What would open a list, a quote or a heading underline at the start of a line.
_MD_LEADING = re.compile(r"^(?:[-+=>]|\d+(?=[.)]))")


def esc(value: Any) -> str:
    """Text from a record or a trace, safe in Markdown: on one line, markup characters escaped,
    so a title cannot open a heading, a table cell, a link, a list or a <details> block."""
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), " ".join(str(value).split()))
    lead = _MD_LEADING.match(text)
    if lead is None:
        return text
    if lead.group(0)[0].isdigit():  # "12. x" -> "12\. x"
        return lead.group(0) + "\\" + text[lead.end() :]
    return "\\" + text


def opt_esc(value: Any) -> str | None:
    """esc(value), or None (an empty cell) for None."""
    return None if value is None else esc(value)


def code(value: Any) -> str:
    """Record text as an inline code span: a fence longer than any backtick run inside."""
    text = " ".join(str(value).split())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def cell(value: Any) -> str:
    """A table cell; callers escape record text (esc / code) before adding their own markup."""
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return " ".join(text.split())


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """A GitHub-flavoured table and the blank line after it."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return [*out, ""]
