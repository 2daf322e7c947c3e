"""Key bindings by id: the catalogue of every binding and the TOML keymap that rebinds them."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding, BindingType

from workbench.errors import WorkbenchError

DEFAULT_KEYMAP = Path(__file__).with_name("default_keymap.toml")


@dataclass(frozen=True)
class BindingInfo:
    """One binding as the help screen and the keymap see it."""

    scope: str
    id: str
    keys: str
    description: str
    action: str


def catalogue(scopes: Sequence[tuple[str, Sequence[BindingType]]]) -> list[BindingInfo]:
    """Every binding with an id, in the order the scopes list them."""
    out: list[BindingInfo] = []
    for scope, bindings in scopes:
        for b in bindings:
            if isinstance(b, Binding) and b.id is not None:
                out.append(BindingInfo(scope, b.id, b.key, b.description, b.action))
    return out


def apply_overrides(infos: Iterable[BindingInfo], keymap: dict[str, str]) -> list[BindingInfo]:
    """The catalogue with the keys a keymap gives to some ids."""
    return [
        BindingInfo(i.scope, i.id, keymap.get(i.id, i.keys), i.description, i.action) for i in infos
    ]


def parse_keymap(text: str, source: str, known_ids: Iterable[str]) -> dict[str, str]:
    """Binding id -> keys from TOML text holding a [keys] table; raises WorkbenchError."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(source, f"keymap is not valid TOML ({exc})") from exc
    table = doc.get("keys")
    if not isinstance(table, dict):
        raise WorkbenchError(source, 'keymap has no [keys] table (write: [keys] "app.quit" = "q")')
    known = set(known_ids)
    keymap: dict[str, str] = {}
    for binding_id, keys in table.items():
        if binding_id not in known:
            raise WorkbenchError(
                source, f"unknown binding id {binding_id!r} (the help screen lists the ids)"
            )
        if not isinstance(keys, str) or not keys.strip():
            raise WorkbenchError(
                source, f'binding {binding_id!r} needs a key string such as "ctrl+s"'
            )
        keymap[binding_id] = ",".join(k.strip() for k in keys.split(",") if k.strip())
    return keymap


def load_keymap(path: Path, known_ids: Iterable[str]) -> dict[str, str]:
    """Read a keymap file; a missing or malformed file is a one-line WorkbenchError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise WorkbenchError(str(path), "keymap file does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkbenchError(str(path), f"cannot read keymap ({exc})") from exc
    return parse_keymap(text, str(path), known_ids)


def render_keymap(infos: Iterable[BindingInfo]) -> str:
    """The TOML of a keymap that states every binding's keys, grouped by scope."""
    lines = [
        '# Incident Workbench keymap: binding id = "key[,key...]" (Textual key names,',
        '# e.g. "ctrl+s", "f1", "question_mark"). Pass a copy with: workbench --keymap FILE',
        "[keys]",
    ]
    scope = None
    for info in infos:
        if info.scope != scope:
            scope = info.scope
            lines.append(f"# {scope}")
        lines.append(f'"{info.id}" = "{info.keys}"  # {info.description}')
    return "\n".join(lines) + "\n"
