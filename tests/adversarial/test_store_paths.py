"""Paths are paths: a store whose path holds glob characters, or a `key=value` directory that
duckdb's hive partitioning would parse, is read literally, never as another store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import workbench

from triage_stores import RunSpec, write_run

# (the store's directory name, a neighbour that the name matches as a glob)
GLOBS = [
    ("s[12]", "s1"),
    ("s[!x]", "s1"),
    ("s*", "s1"),
    ("s?", "s1"),
    ("s[a-z]", "sb"),
    ("store]", "store]x"),
    ("**", "x"),
    ("s{1,2}", "s1"),
]


def _two_stores(root: Path, name: str, decoy: str) -> Path:
    """The store named `name` and a decoy store beside it with the same run ids."""
    for folder, label in ((decoy, "decoy"), (name, "mine")):
        write_run(root / folder, RunSpec("base", seed=1, n_requests=12, label=f"{label}-base"))
        write_run(root / folder, RunSpec("failing", seed=2, n_requests=12, label=f"{label}-f"))
    return root / name


@pytest.mark.parametrize(("name", "decoy"), GLOBS, ids=[g[0] for g in GLOBS])
def test_a_store_path_with_glob_characters_is_read_literally(
    tmp_path: Path, name: str, decoy: str
) -> None:
    store = _two_stores(tmp_path, name, decoy)
    out = workbench(["runs", "--store", str(store), "--json"], tmp_path)
    assert out.code == 0, str(out)
    runs = json.loads(out.stdout)
    assert sorted(r["label"] for r in runs) == ["mine-base", "mine-f"], str(out)
    assert [r["n_requests"] for r in runs] == [12, 12]


def test_a_run_id_directory_above_the_store_does_not_rename_its_runs(tmp_path: Path) -> None:
    store = tmp_path / "run_id=evil" / "store"
    write_run(store, RunSpec("base", seed=1, n_requests=12, label="mine"))
    out = workbench(["runs", "--store", str(store), "--json"], tmp_path)
    assert out.code == 0, str(out)
    runs = json.loads(out.stdout)
    assert [(r["run_id"], r["n_requests"]) for r in runs] == [("base", 12)], str(out)


def test_triage_of_a_glob_named_store_reads_its_own_runs(tmp_path: Path) -> None:
    mine = {"n_requests": 40, "drift_share": 0.3, "recompile_us": 8000.0}
    for folder, seeds in (("sta", (7, 8)), ("st[ab]", (1, 2)), ("plain", (1, 2))):
        write_run(tmp_path / folder, RunSpec("base", seed=seeds[0], n_requests=40))
        write_run(tmp_path / folder, RunSpec("failing", seed=seeds[1], **mine))  # type: ignore[arg-type]

    def triage(folder: str) -> str:
        store = tmp_path / folder
        argv = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "base"]
        out = workbench([*argv, "--json"], tmp_path)
        assert out.code == 0, str(out)
        return out.stdout.replace(str(store), "STORE")

    # The same runs under a plain name triage the same; the decoy's runs would not.
    assert triage("st[ab]") == triage("plain")
    assert triage("sta") != triage("plain")
