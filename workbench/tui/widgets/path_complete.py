"""Path completion for the file picker: Tab completion like a shell, and "did you mean" hints."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

MAX_LISTED = 6


def expand(text: str, base: Path) -> Path:
    """The path `text` means: ~ expanded, relative paths taken from `base`."""
    path = Path(os.path.expanduser(text.strip() or "."))
    return path if path.is_absolute() else base / path


def _entries(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError:
        return []


def complete(text: str, base: Path) -> tuple[str, list[str]]:
    """Complete the last part of `text` as far as it is unambiguous.

    Returns the new text and, when several entries still match, their names (folders end in /).
    Text is kept as the user wrote it (~ and relative stay) with only the completion appended.
    """
    if text.endswith(("/", os.sep)) or not text:
        folder, stem, head = expand(text, base), "", text
    else:
        full = expand(text, base)
        folder, stem = full.parent, full.name
        head = text[: len(text) - len(stem)]
    names = [n for n in _entries(folder) if n.startswith(stem)]
    if not stem:
        names = [n for n in names if not n.startswith(".")]
    if not names:
        return text, []
    common = os.path.commonprefix(names)  # noqa: RUF071 (names, not paths: by character)
    done = head + common
    if len(names) == 1 and (folder / common).is_dir():
        return done + "/", []
    if len(names) == 1:
        return done, []
    return done, [n + ("/" if (folder / n).is_dir() else "") for n in names]


def near_misses(path: Path) -> list[str]:
    """For a path that does not exist: the closest names in its nearest existing folder, as
    full paths (at most three)."""
    parts: list[str] = []
    folder = path
    while not folder.exists() and folder != folder.parent:
        parts.append(folder.name)
        folder = folder.parent
    if not parts:
        return []
    wanted = parts[-1]  # the first missing part
    close = difflib.get_close_matches(wanted, _entries(folder), n=3, cutoff=0.6)
    rest = list(reversed(parts[:-1]))
    return [str(folder.joinpath(name, *rest)) for name in close]
