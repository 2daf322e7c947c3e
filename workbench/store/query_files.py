"""The named SQL files in queries/: where they are, their text, and their parameter names.

Kept apart from db.py so that readers of other databases (the nsys SQLite importer) load their
SQL the same way without importing duckdb.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_QUERY_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")
_LITERAL = re.compile(r"'(?:[^']|'')*'")


def queries_dir() -> Path:
    """queries/ at the repository root, or the copy packed into an installed wheel."""
    here = Path(__file__).resolve()
    repo = here.parents[2] / "queries"
    return repo if repo.is_dir() else here.parents[1] / "_queries"


@cache
def load_query(name: str) -> str:
    """The text of queries/<name>.sql."""
    if not _QUERY_NAME.fullmatch(name):
        raise ValueError(f"bad query name {name!r}")
    return (queries_dir() / f"{name}.sql").read_text(encoding="utf-8")


@cache
def param_order(name: str) -> tuple[str, ...]:
    """The $names of queries/<name>.sql in order of first use: SQLite numbers named
    parameters that way, and binders that bind by position (ADBC) need the order."""
    body = "\n".join(line.split("--", 1)[0] for line in load_query(name).splitlines())
    seen: dict[str, None] = {}
    for m in _PARAM.finditer(_LITERAL.sub("''", body)):
        seen.setdefault(m.group(1), None)
    return tuple(seen)
