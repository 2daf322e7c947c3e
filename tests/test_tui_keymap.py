"""Keymap: every binding has an id, the shipped TOML states them all, bad keymaps fail in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.tui.app_keys import binding_scopes, known_binding_ids
from workbench.tui.keymap import (
    DEFAULT_KEYMAP,
    catalogue,
    load_keymap,
    parse_keymap,
    render_keymap,
)


def test_every_binding_has_a_unique_id() -> None:
    from textual.binding import Binding

    ids = []
    for scope, bindings in binding_scopes():
        for b in bindings:
            assert isinstance(b, Binding), f"{scope}: {b!r} is not a Binding"
            assert b.id, f"{scope}: binding {b.key} -> {b.action} has no id"
            ids.append(b.id)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_shipped_keymap_states_every_binding() -> None:
    assert DEFAULT_KEYMAP.read_text(encoding="utf-8") == render_keymap(catalogue(binding_scopes()))
    keymap = load_keymap(DEFAULT_KEYMAP, known_binding_ids())
    assert set(keymap) == set(known_binding_ids())


def test_keymap_rebinds(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text('[keys]\n"runs.mark_failing" = "x, ctrl+f"\n', encoding="utf-8")
    assert load_keymap(path, known_binding_ids()) == {"runs.mark_failing": "x,ctrl+f"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[keys\n", "not valid TOML"),
        ('"app.quit" = "q"\n', "no [keys] table"),
        ('[keys]\n"no.such" = "q"\n', "unknown binding id 'no.such'"),
        ('[keys]\n"app.quit" = 3\n', "needs a key string"),
        ('[keys]\n"app.quit" = " "\n', "needs a key string"),
    ],
)
def test_bad_keymap_is_one_line(text: str, problem: str) -> None:
    with pytest.raises(WorkbenchError) as err:
        parse_keymap(text, "k.toml", known_binding_ids())
    assert problem in err.value.one_line()
    assert err.value.subject == "k.toml"
    assert "\n" not in err.value.one_line()


def test_missing_keymap_file(tmp_path: Path) -> None:
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_keymap(tmp_path / "nope.toml", known_binding_ids())
