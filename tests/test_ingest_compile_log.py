"""ingest with --compile-log: fingerprint of log directories, restarted compile ids, the
compiler columns from the log, and which log of a directory serves a ranked trace."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ingest_helpers import TORCH
from workbench.errors import WorkbenchError
from workbench.store.attribution.rules import load_rules
from workbench.store.importers.compile_log.compile_log import read_compile_log
from workbench.store.ingest import ingest
from workbench.store.layout import read_run_row

LOG_NAME = "dedicated_log_torch_trace.log.gz"
FAILING = "serving_static_failing"
RERUN = "serving_static_rerun"


def trace(stem: str) -> Path:
    return TORCH / f"{stem}.pt.trace.json.gz"


def real_log(stem: str) -> Path:
    return TORCH / f"{stem}.torch_trace" / LOG_NAME


def log_dir(tmp_path: Path, stem: str, name: str = LOG_NAME) -> Path:
    """A fresh directory holding one real log under `name`."""
    d = tmp_path / f"log_{stem}_{name}"
    d.mkdir()
    shutil.copy(real_log(stem), d / name)
    return d


def edit_log(src: Path, dst: Path, edit: Any) -> Path:
    """src's lines, each passed through edit(str), gzip-written to dst."""
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    with gzip.open(dst, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(edit(line) for line in lines))
    return dst


def edit_trace(src: Path, dst: Path, edit: Any) -> Path:
    """The Kineto document passed through edit(dict), gzip-written to dst."""
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    edit(doc)
    with gzip.open(dst, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return dst


# 1. The import fingerprint covers the logs of a --compile-log directory.


def test_reimport_after_a_log_in_the_directory_changed_is_refused(tmp_path: Path) -> None:
    store, logs = tmp_path / "s", log_dir(tmp_path, RERUN)
    assert ingest(store, trace(RERUN), compile_log=logs).status == "imported"
    assert ingest(store, trace(RERUN), compile_log=logs).status == "unchanged"
    # Same name, other content: the run would get other compiles, so it is not "unchanged".
    edit_log(real_log(RERUN), logs / LOG_NAME, lambda s: s.replace('"guard_count": ', '"x": '))
    with pytest.raises(WorkbenchError, match="different content or options"):
        ingest(store, trace(RERUN), compile_log=logs)


def test_log_file_names_count_other_files_do_not(tmp_path: Path) -> None:
    store, logs = tmp_path / "s", log_dir(tmp_path, RERUN)
    ingest(store, trace(RERUN), compile_log=logs)
    # Files the reader never reads do not change the import.
    (logs / "README.txt").write_text("notes about this run\n", encoding="utf-8")
    (logs / "sub").mkdir()
    (logs / "sub" / "other.log").write_text("not read: the reader does not recurse\n")
    assert ingest(store, trace(RERUN), compile_log=logs).status == "unchanged"
    # A log renamed to another rank's name is read differently: it counts.
    (logs / LOG_NAME).rename(logs / "dedicated_log_torch_trace_rank_0_x.log.gz")
    with pytest.raises(WorkbenchError, match="different content or options"):
        ingest(store, trace(RERUN), compile_log=logs)


# 2. Restarted compilations ("0/3_1") keep their attempt on both sides of the join.


def test_rules_capture_restarted_compile_ids() -> None:
    pat = load_rules().compile_id
    for name, want in [
        ("dynamo_data: compile_id=0/3_1", "0/3_1"),
        ("Torch-Compiled Region: 12/0_2", "12/0_2"),
        ("compile_file_data: compile_id=0/3", "0/3"),
        ("Torch-Compiled Region: 0/7", "0/7"),
    ]:
        m = pat.search(name)
        assert m is not None and next(g for g in m.groups() if g) == want, name


def test_restarted_compile_joins_its_log_row(tmp_path: Path) -> None:
    """Compile 0/3 of the real failing run relabelled as a restart (attempt 1) on both sides."""

    def relabel_events(doc: dict[str, Any]) -> None:
        for e in doc["traceEvents"]:
            name = e.get("name")
            if isinstance(name, str):
                e["name"] = re.sub(r"(compile_id=|Region: )0/3$", r"\g<1>0/3_1", name)

    def relabel_log(line: str) -> str:
        line = line.replace('"compile_id": "0/3"', '"compile_id": "0/3_1"')
        return line.replace(
            '"frame_compile_id": 3, "attempt": 0', '"frame_compile_id": 3, "attempt": 1'
        )

    path = edit_trace(trace(FAILING), tmp_path / "restart.json.gz", relabel_events)
    log = edit_log(real_log(FAILING), tmp_path / "restart.log.gz", relabel_log)
    assert "0/3_1" in read_compile_log(log).column("compile_id").to_pylist()
    store = tmp_path / "s"
    ingest(store, path, run_id="r", compile_log=log)
    got = duckdb.execute(
        "SELECT e.compile_id, c.compile_id FROM read_parquet($e) e "
        "LEFT JOIN read_parquet($c) c USING (compile_id) WHERE e.recompile ORDER BY e.ts_us",
        {
            "e": str(store / "events" / "run_id=r" / "*.parquet"),
            "c": str(store / "compiles" / "run_id=r" / "*.parquet"),
        },
    ).fetchall()
    assert [g[0] for g in got] == ["0/0", "0/1", "0/2", "0/3_1", *(f"0/{i}" for i in range(4, 9))]
    assert all(e == c for e, c in got)  # every compilation, the restarted one too, joined
    # The compiled region of the restarted compilation carries its full id as well.
    regions = duckdb.execute(
        "SELECT count(*) FROM read_parquet($e) WHERE name = 'Torch-Compiled Region: 0/3_1' "
        "AND compile_id = '0/3_1'",
        {"e": str(store / "events" / "run_id=r" / "*.parquet")},
    ).fetchone()
    assert regions is not None and regions[0] > 0


def test_envelope_attempt_gives_the_restarted_id(tmp_path: Path) -> None:
    """A log whose metrics carry no compile_id takes it from the envelope, attempt included."""

    def drop_metric_id(line: str) -> str:
        if '{"compilation_metrics"' not in line:
            return line
        line = re.sub(r'"compile_id": "[^"]*", ?', "", line)
        return line.replace(
            '"frame_compile_id": 3, "attempt": 0', '"frame_compile_id": 3, "attempt": 1'
        )

    log = edit_log(real_log(FAILING), tmp_path / "no_ids.log.gz", drop_metric_id)
    ids = read_compile_log(log).column("compile_id").to_pylist()
    assert ids == ["0/0", "0/1", "0/2", "0/3_1", *(f"0/{i}" for i in range(4, 9))]
    pat = load_rules().compile_id
    for cid in ids:  # what the log side writes, the event side reads back whole
        m = pat.search(f"dynamo_data: compile_id={cid}")
        assert m is not None and m.group(1) == cid


# 3. compiler / compiler_version from the log's compilation_metrics.pytorch_version.


def runs_row(store: Path, run_id: str) -> dict[str, Any]:
    row = read_run_row(store, run_id)
    assert row is not None
    return row


def test_compiler_version_from_the_log(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, trace(FAILING), run_id="logged", compile_log=real_log(FAILING))
    row = runs_row(store, "logged")
    assert (row["compiler"], row["compiler_version"]) == ("torch.compile", "2.13.0+cpu")
    # Without the log the trace's compile spans name the compiler but no version: null.
    ingest(store, trace(FAILING), run_id="bare")
    row = runs_row(store, "bare")
    assert (row["compiler"], row["compiler_version"]) == ("torch.compile", None)


def test_tags_win_over_the_log(tmp_path: Path) -> None:
    store, log = tmp_path / "s", real_log(FAILING)
    ingest(store, trace(FAILING), run_id="v", compile_log=log, tags={"compiler_version": "2.13"})
    assert runs_row(store, "v")["compiler_version"] == "2.13"
    ingest(store, trace(FAILING), run_id="c", compile_log=log, tags={"compiler": "inductor"})
    row = runs_row(store, "c")
    # Another compiler by the user's word: torch's version is not stated for it.
    assert (row["compiler"], row["compiler_version"]) == ("inductor", None)


def test_unclear_versions_stay_null(tmp_path: Path) -> None:
    store = tmp_path / "s"
    count = iter(range(1000))

    def two_versions(line: str) -> str:
        if '"pytorch_version"' in line and next(count) % 2:
            return line.replace('"2.13.0+cpu"', '"2.12.1+cpu"')
        return line

    mixed = edit_log(real_log(FAILING), tmp_path / "mixed.log.gz", two_versions)
    report = ingest(store, trace(FAILING), run_id="m", compile_log=mixed)
    assert runs_row(store, "m")["compiler_version"] is None
    assert any("2.12.1+cpu, 2.13.0+cpu" in w for w in report.warnings)
    none = edit_log(
        real_log(FAILING),
        tmp_path / "none.log.gz",
        lambda s: re.sub(r'"pytorch_version": "[^"]*", ?', "", s),
    )
    ingest(store, trace(FAILING), run_id="n", compile_log=none)
    assert runs_row(store, "n")["compiler_version"] is None


# 4. A ranked trace and a directory of logs.


def ranked_trace(tmp_path: Path, rank: int) -> Path:
    def add_rank(doc: dict[str, Any]) -> None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 4}

    return edit_trace(trace(RERUN), tmp_path / f"rank{rank}.json.gz", add_rank)


def test_single_unranked_log_serves_any_rank(tmp_path: Path) -> None:
    path = ranked_trace(tmp_path, 3)
    report = ingest(tmp_path / "s", path, run_id="r3", compile_log=log_dir(tmp_path, RERUN))
    assert report.compiles_logged == read_compile_log(real_log(RERUN)).num_rows > 0
    assert runs_row(tmp_path / "s", "r3")["rank"] == 3


def test_single_log_named_for_another_rank_is_refused(tmp_path: Path) -> None:
    path = ranked_trace(tmp_path, 3)
    logs = log_dir(tmp_path, RERUN, "dedicated_log_torch_trace_rank_0_ab.log.gz")
    with pytest.raises(WorkbenchError, match="holds only the log of rank 0, not of rank 3"):
        ingest(tmp_path / "s", path, compile_log=logs)
    assert not (tmp_path / "s").exists()
    # The same single log named for the trace's rank is taken.
    (logs / "dedicated_log_torch_trace_rank_0_ab.log.gz").rename(
        logs / "dedicated_log_torch_trace_rank_3_ab.log.gz"
    )
    assert ingest(tmp_path / "s", path, compile_log=logs).compiles_logged > 0


def test_several_logs_need_the_trace_rank_to_pick_one(tmp_path: Path) -> None:
    logs = log_dir(tmp_path, RERUN, "dedicated_log_torch_trace_rank_3_ab.log.gz")
    shutil.copy(real_log(FAILING), logs / "dedicated_log_torch_trace_rank_0_cd.log.gz")
    report = ingest(tmp_path / "s", ranked_trace(tmp_path, 3), compile_log=logs)
    assert report.compiles_logged == read_compile_log(real_log(RERUN)).num_rows
    with pytest.raises(WorkbenchError, match="ranks 0, 3; choose one rank"):
        ingest(tmp_path / "t", trace(RERUN), compile_log=logs)  # no rank in the trace
