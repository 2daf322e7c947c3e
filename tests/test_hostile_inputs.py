"""Hostile run ids, tags and names through every command: nothing executed, nothing written
outside the store, and a rejected command leaves the store as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ingest_helpers import MI250
from triage_stores import RunSpec, write_run
from workbench.cli.main import COMMANDS, main

TRACE = MI250


def _hostile(canary: Path) -> list[str]:
    """Values that would run SQL, a shell or escape the store if any layer interpolated them."""
    return [
        f"x'; COPY (SELECT 42) TO '{canary}/sql.csv'; --",
        f"x\"); COPY (SELECT 42) TO '{canary}/sql2.csv'; --",
        "../../outside",
        "../" * 8 + "tmp/escaped",
        f"$(touch {canary}/shell)",
        f"a;touch {canary}/shell2;b",
        "a`id`b",
        "/absolute/path",
        "bad\nnewline",
        "",
    ]


def _tree(root: Path, skip: Path | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(root))] = "dir"
    return out


def _argvs(store: Path, h: str) -> list[list[str]]:
    s = str(store)
    # `sample` writes a new store where it is told: a hostile name, but as a folder in the store
    sample = ["sample", "--out", str(store / "samples" / "s'; DROP TABLE runs; --")]
    return [
        *([sample] if h == "a`id`b" else []),
        ["ingest", str(TRACE), "--store", s, "--run-id", h],
        ["ingest", str(TRACE), "--store", s, "--run-id", "okrun", "--tag", f"{h}={h}"],
        ["ingest", str(TRACE), "--store", s, "--run-id", "okrun2", "--label", h, "--tag", f"k={h}"],
        ["runs", "--store", s],
        ["triage", "--store", s, "--failing", h],
        ["triage", "--store", s, "--failing", "failing", "--comparator", h],
        ["triage", "--store", s, "--failing", "failing", "--fixed", h],
        ["triage", "--store", s, "--failing", "failing", "--hardware", h],
        ["triage", "--store", s, "--failing", "failing", "--suspect", h, "--json"],
        ["triage", "--store", s, "--failing", "failing", "--comparator", "base", "--incident", h],
        ["triage", "--store", s, "--failing", h, "--candidates", "--json"],
        ["triage", "--store", s, "--failing", "failing", "--candidates", "--suspect", h],
        ["triage", "--store", s, "--failing", "failing", "--lens", f"base,{h}"],
        ["incident", "new", "--store", s, "--title", "t", "--id", h],
        ["incident", "new", "--store", s, "--title", "t", "--failing", h, "--comparator", h],
        ["incident", "show", "--store", s, h],
        ["incident", "pair", "--store", s, h, "--failing", "failing", "--comparator", "base"],
        ["incident", "classify", "--store", s, h, "--mechanism", h],
        ["assign", "--store", s, "--incident", h, "--propose"],
        ["validate", "--store", s, "--incident", h, "--candidate", h],
        ["export", "--store", s, "--incident", h, "-o", "-"],
        ["ingest", "--fleet", str(TRACE), "--store", s, "--run-id", h],
        [
            "ingest",
            "--fleet",
            str(TRACE),
            "--store",
            s,
            "--run-id",
            "okrun",
            "--host-tag",
            f"{h}:{h}={h}",
        ],
        ["fleet", "--store", s, "--failing", h],
        ["fleet", "--store", s, "--failing-tag", f"{h}={h}", "--json"],
        ["fleet", "--store", s, "--failing", "failing", "--comparator", h],
        ["incident", "edit", "--store", s, h, "--title", h],
        # Refused before any socket opens: a hostile host is never a loopback address.
        ["serve", "--store", s, "--host", h],
        ["baseline", "tag", h, "base", "--store", s],
        ["baseline", "tag", "ok", h, "--store", s],
        ["baseline", "show", h, "--store", s],
        ["baseline", "rm", h, "--store", s],
        ["gate", "--store", s, "--candidate", h, "--comparator", "base"],
        ["gate", "--store", s, "--candidate", "failing", "--against", f"baseline:{h}"],
        ["gate", "--store", s, "--candidate", "failing", "--comparator", h, "--format", "junit"],
    ]


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    store = tmp_path / "store"
    write_run(store, RunSpec("base", seed=1, n_requests=60))
    write_run(
        store,
        RunSpec(
            "failing",
            seed=2,
            n_requests=60,
            drift_share=0.3,
            recompile_us=8000.0,
            label="l'; DROP TABLE runs; --",
            tags={"o'k; DROP": "v'); COPY (SELECT 1) TO 'x.csv'; --", "../../k": "../v"},
        ),
    )
    canary = tmp_path / "canary"
    canary.mkdir()
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path, store, canary


def test_every_command_is_covered() -> None:
    covered = {argv[0] for argv in _argvs(Path("s"), "a`id`b")}
    assert covered == set(COMMANDS), f"commands without a hostile case: {set(COMMANDS) - covered}"


def test_hostile_values_are_inert(
    world: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, store, canary = world
    outside = _tree(root, skip=store)
    runs_before = _tree(store / "runs")
    codes: dict[str, int] = {}
    for h in _hostile(canary):
        for argv in _argvs(store, h):
            try:
                codes[" ".join(argv)] = main(argv)
            except SystemExit as exc:  # argparse refusing a value is fine too
                codes[" ".join(argv)] = int(exc.code or 0)
    capsys.readouterr()
    assert list(canary.iterdir()) == [], "an injected statement or shell command ran"
    assert _tree(root, skip=store) == outside, "something was written outside the store"
    # hostile ids never became files: every run file name is a valid id, no path escapes
    after = _tree(store / "runs")
    added = set(after) - set(runs_before)
    assert added <= {"okrun.parquet", "okrun2.parquet"}, added
    assert all(runs_before[k] == after[k] for k in runs_before), "an existing run changed"
    for p in store.rglob("*"):
        assert store in p.resolve().parents or p.resolve() == store
    # commands that got a hostile run id as the subject of a lookup fail with exit code 2
    bad = [k for k, c in codes.items() if k.startswith("triage") and "--failing failing" not in k]
    assert bad and all(codes[k] == 2 for k in bad)


def test_hostile_tags_in_the_store_are_only_data(world: tuple[Path, Path, Path]) -> None:
    from workbench.triage.report_text import render
    from workbench.triage.triage import triage

    _, store, canary = world
    result = triage(store, "failing", "base")
    text = render(result)
    assert result.failing == "failing"
    doc = result.to_json()
    assert doc["comparator"] == "base"
    assert list(canary.iterdir()) == []
    assert "TRIAGE" in text
