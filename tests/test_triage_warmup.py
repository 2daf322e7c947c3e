"""Warm-up is not a regression: the first compilation is reported apart from steady recompiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from triage_stores import RunSpec, build_run, write_run
from workbench.store import arrays, db, layout
from workbench.triage import evidence, warmup


def test_warmup_split_and_affected_requests(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("a", seed=3, drift_share=0.3, recompile_us=10_000.0))
    write_run(tmp_path, RunSpec("b", seed=4, warmup_compile_us=60_000.0))
    con = db.connect(tmp_path)
    wa = warmup.warmup_of(con, "a")
    assert len(wa.warmup) == 1 and wa.warmup[0].recompile_reason is None
    assert len(wa.steady) == 3 and all(
        "size mismatch" in (c.recompile_reason or "") for c in wa.steady
    )
    assert wa.warmup_us == pytest.approx(20_000.0)
    assert wa.reasons()[0]["n"] == 1 and len(wa.reasons()) == 3
    wb = warmup.warmup_of(con, "b")
    assert wb.steady == [] and wb.warmup_us == pytest.approx(60_000.0)
    # a 60 ms first compilation backs up the queue: every request queued behind it is warm-up
    assert wb.affected_requests[0] == "r0" and len(wb.affected_requests) > 5
    req = arrays.load_requests(con, "b")
    n = len(wb.affected_requests)
    waits = req.start_us - req.arrival_us
    assert np.all(waits[1:n] > 1.0) and waits[n] <= 1.0


def test_tail_with_and_without_warmup(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("f", seed=5, warmup_compile_us=80_000.0))
    write_run(tmp_path, RunSpec("c", seed=6, warmup_compile_us=0.0))
    con = db.connect(tmp_path)
    w = warmup.warmup_of(con, "f")
    samples = evidence.stage_samples(con, "f", "c").table
    with_w = evidence.stage_rows(samples)[0]
    without = evidence.stage_rows(samples, skip_failing=w.affected_requests)[0]
    # the warm-up alone makes a p99 "regression" that vanishes without it
    assert with_w.diff["p99"].lo > 10_000.0
    assert (
        without.diff["p99"].lo < 0.0 < without.diff["p99"].hi
        or abs(without.diff["p99"].value) < 2_000
    )
    assert without.n_failing == 200 - len(w.affected_requests)


def test_named_warmup_requests(tmp_path: Path) -> None:
    t = build_run(RunSpec("n", seed=7, warmup_compile_us=0.0))
    names = ["warmup#0", "warmup#1"] + ["request"] * (t.requests.num_rows - 2)
    req = t.requests.set_column(t.requests.column_names.index("name"), "name", pa.array(names))
    layout.commit_run(tmp_path, layout.RunTables(t.run, t.events, req, t.compiles), source="t")
    con = db.connect(tmp_path)
    w = warmup.warmup_of(con, "n")
    assert w.affected_requests[:2] == ["r0", "r1"]
    run = arrays.load_run_arrays(con, "n")
    assert run.compiled_shapes == {run.requests.shape_key[0], run.requests.shape_key[1]}
