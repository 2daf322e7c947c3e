"""queries/*.sql: headers, named parameters only, and the numbers they give on a known store."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from accel import stats
from triage_stores import RunSpec, incident_store, write_run
from workbench.store import db
from workbench.store.arrays import run_exists, run_presence
from workbench.triage import evidence

MINE = [
    "run_requests",
    "run_ops",
    "run_presence",
    "run_committed",
    "compile_phases",
    "warmup_requests",
    "stage_quantiles",
    "stage_samples",
    "tail_drivers",
    "queue_wait_profile",
    "batch_impact",
    "core_fairness",
    "fusion_effect",
    "fallback_recompile_rates",
    "shape_drift",
    "tag_diff",
    "bandwidth_lens",
    "run_candidates",
    "shape_buckets",
    "fallback_kernels",
]
PAIR = {"failing": "failing", "comparator": "comparator"}
NO_SKIP: dict[str, list[str]] = {"skip_failing": [], "skip_comparator": []}


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    store = incident_store(tmp_path_factory.mktemp("store"))
    c = db.connect(store)
    yield c
    c.close()


@pytest.mark.parametrize("name", MINE)
def test_query_has_header_and_named_parameters_only(name: str) -> None:
    text = (db.queries_dir() / f"{name}.sql").read_text()
    head = [line for line in text.splitlines() if line.startswith("--")]
    joined = "\n".join(head)
    for part in ("purpose:", "parameters:", "columns:"):
        assert part in joined, f"{name}.sql header lacks {part}"
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert "?" not in body, f"{name}.sql uses a positional parameter"
    declared = set(re.findall(r"\$([a-z_]+)", joined))
    used = set(re.findall(r"\$([a-z_]+)", body))
    assert used == declared, f"{name}.sql: header names {declared}, body uses {used}"


def test_stage_quantiles_match_accel_stats(con) -> None:  # type: ignore[no-untyped-def]
    t = db.query(con, "stage_quantiles", {**PAIR, **NO_SKIP}).to_pylist()
    samples = evidence.stage_samples(con, "failing", "comparator").table
    roles = np.array(samples.column("role").to_pylist())
    for row in t:
        col = "latency_us" if row["stage"] == "latency" else f"{row['stage']}_us"
        x = samples.column(col).to_numpy()[roles == row["role"]]
        assert row["n"] == x.size == 200
        q = stats.quantile(x, [0.5, 0.95, 0.99])
        assert np.allclose([row["p50_us"], row["p95_us"], row["p99_us"]], q)
    # skipping requests changes n, per run (request ids repeat across runs)
    skip = {"skip_failing": ["r0", "r1"], "skip_comparator": ["r0"]}
    t2 = db.query(con, "stage_quantiles", {**PAIR, **skip}).to_pylist()
    assert {(r["role"], r["n"]) for r in t2} == {("failing", 198), ("comparator", 199)}


def test_stage_rows_carry_cis_that_cover_the_estimate(con) -> None:  # type: ignore[no-untyped-def]
    rows = evidence.stage_rows(evidence.stage_samples(con, "failing", "comparator").table)
    assert [r.stage for r in rows][:3] == ["latency", "ingress", "lowering"]
    lat = rows[0]
    for k in ("p50", "p95", "p99"):
        iv = lat.failing[k]
        assert iv.lo <= iv.value <= iv.hi
        d = lat.diff[k]
        assert d.lo <= d.value <= d.hi
    # the injected recompiles make the failing tail clearly worse
    assert lat.diff["p99"].lo > 0


def test_tail_drivers_name_queueing_for_a_recompile_backlog(con) -> None:  # type: ignore[no-untyped-def]
    rows = db.query(con, "tail_drivers", {**PAIR, "tail_q": 0.95, **NO_SKIP}).to_pylist()
    by = {r["driver"]: r for r in rows}
    assert set(by) == {"queueing", "core_imbalance", "mapping_fallback", "recompile"}
    assert rows[0]["driver"] == "queueing"
    assert by["queueing"]["share"] > 0.5
    assert by["mapping_fallback"]["delta_us"] == 0
    gap = by["queueing"]["p99_gap_us"]
    lat = db.query(con, "stage_quantiles", {**PAIR, **NO_SKIP}).to_pylist()
    p99 = {r["role"]: r["p99_us"] for r in lat if r["stage"] == "latency"}
    assert gap == pytest.approx(p99["failing"] - p99["comparator"])


def test_compile_phases_split_warmup_from_steady(con) -> None:  # type: ignore[no-untyped-def]
    rows = db.query(
        con, "compile_phases", {"run_id": "failing", "warmup_name": "(?i)warm-?up"}
    ).to_pylist()
    assert [r["phase"] for r in rows] == ["warmup", "steady", "steady", "steady"]
    assert rows[0]["recompile_reason"] is None and rows[0]["request_id"] == "r0"
    assert all("size mismatch" in r["recompile_reason"] for r in rows[1:])
    assert all(r["shape_key"] and r["request_id"] for r in rows)


def test_shape_drift_psi_matches_stats(con) -> None:  # type: ignore[no-untyped-def]
    d = evidence.shape_drift(con, "failing", "comparator")
    nf = [b["n_failing"] for b in d.buckets]
    nc = [b["n_comparator"] for b in d.buckets]
    assert sum(nf) == sum(nc) == 200
    assert d.psi == pytest.approx(stats.psi(nc, nf))
    assert all(b["psi"] >= 0 for b in d.buckets)


def test_tag_diff_marks_locked_mismatch(con) -> None:  # type: ignore[no-untyped-def]
    rows = db.query(
        con,
        "tag_diff",
        {"failing": "failing", "others": ["hot-box", "comparator"], "locked": ["thermal_state"]},
    ).to_pylist()
    hot = [r for r in rows if r["run_id"] == "hot-box"]
    assert hot[0]["key"] == "thermal_state" and hot[0]["differs"] and hot[0]["locked"]
    assert not any(r["differs"] for r in rows if r["run_id"] == "comparator")


def test_fusion_effect_counts_launches_saved(con) -> None:  # type: ignore[no-untyped-def]
    rows = db.query(con, "fusion_effect", PAIR).to_pylist()
    for r in rows:
        # 200 requests x one group of 3 execution ops: 2 launches saved per request
        assert r["fusion_groups"] == 200 and r["fused_ops"] == 600
        assert r["launches_saved"] == 400 and r["launches"] == 1400 - 400


def test_core_fairness_is_one_for_even_cores(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("a", seed=1))
    write_run(tmp_path, RunSpec("b", seed=2))
    c = db.connect(tmp_path)
    rows = db.query(c, "core_fairness", {"failing": "a", "comparator": "b"}).to_pylist()
    for r in rows:
        assert 0.9 < r["jain_index"] <= 1.0
    busy = sum(r["busy_us"] for r in rows if r["run_id"] == "a")
    assert sum(r["busy_share"] for r in rows if r["run_id"] == "a") == pytest.approx(1.0)
    assert busy > 0


def test_rates_and_buckets(con) -> None:  # type: ignore[no-untyped-def]
    rates = {r["role"]: r for r in db.query(con, "fallback_recompile_rates", PAIR).to_pylist()}
    assert rates["failing"]["recompiles"] == 3 and rates["comparator"]["recompiles"] == 0
    assert rates["failing"]["compiles"] == 4 and rates["failing"]["recompile_events"] == 3
    b = db.query(
        con, "shape_buckets", {"run_id": "failing", "compiled_shapes": ["[[8,128,512],[512,512]]"]}
    ).to_pylist()
    assert sum(x["n_requests"] for x in b) == 200
    assert sum(x["recompiles"] for x in b) == 3
    assert [x["compiled"] for x in b].count(True) == 1


def test_bandwidth_lens_places_runs_in_zones(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("base", seed=1))
    write_run(tmp_path, RunSpec("calm", seed=2))
    write_run(tmp_path, RunSpec("spiky", seed=3, drift_share=0.3, recompile_us=30_000.0))
    c = db.connect(tmp_path)
    from accel.profiles import get_profile

    hw = get_profile("h100")
    t = evidence.bandwidth_lens(c, ["base", "calm", "spiky"], hw)
    zones = [r["zone"] for r in t.rows()]
    assert zones[0] == "baseline" and zones[2] == "unstable tail"
    # a tiny on-chip capacity puts every run over it; only growth beyond the baseline saturates
    small = db.query(c, "bandwidth_lens", {**t.parameters, "onchip_bytes": 1.0}).to_pylist()
    assert all(r["pressure"] > 1 for r in small)
    assert [r["zone"] for r in small] == ["baseline", "tuning candidate", "unstable tail"]
    grown = db.query(
        c, "bandwidth_lens", {**t.parameters, "onchip_bytes": 1.0, "pressure_growth": 0.5}
    ).to_pylist()
    assert [r["zone"] for r in grown] == ["baseline", "saturation", "saturation"]


def test_bandwidth_lens_on_the_sample_incident() -> None:
    from accel.profiles import get_profile

    c = db.connect(Path(__file__).resolve().parents[1] / "sample_traces")
    rows = evidence.bandwidth_lens(
        c, ["comparator", "failing", "candidate-rollback"], get_profile("h100")
    ).rows()
    zones = {r["run_id"]: r["zone"] for r in rows}
    # the fusion memory burst triples the working set: saturation; the fix goes back
    assert zones == {
        "comparator": "baseline",
        "failing": "saturation",
        "candidate-rollback": "tuning candidate",
    }


def test_tail_drivers_core_imbalance_counts_real_cores_only() -> None:
    """Core -1 marks serial ops (barriers, copies): counted as a core it would dwarf the cores."""
    import pyarrow.parquet as pq

    sample = Path(__file__).resolve().parents[1] / "sample_traces"
    c = db.connect(sample)
    try:
        rows = db.query(c, "tail_drivers", {**PAIR, "tail_q": 0.95, **NO_SKIP}).to_pylist()
        lat = c.sql(
            "SELECT request_id, latency_us FROM requests WHERE run_id = 'failing'"
        ).fetchall()
    finally:
        c.close()
    ev = pq.read_table(sample / "events" / "run_id=failing").to_pydict()
    busy: dict[tuple[str, int], float] = {}
    for rid, core, dur in zip(ev["request_id"], ev["core"], ev["dur_us"], strict=True):
        if rid is not None and core is not None and core >= 0:
            busy[(rid, core)] = busy.get((rid, core), 0.0) + dur
    per_req: dict[str, list[float]] = {}
    for (rid, _), b in busy.items():
        per_req.setdefault(rid, []).append(b)
    cut = float(np.quantile([v for _, v in lat], 0.95))
    tail = [r for r, v in lat if v >= cut]
    imb = [max(per_req[r]) - float(np.mean(per_req[r])) if r in per_req else 0.0 for r in tail]
    got = {r["driver"]: r for r in rows}["core_imbalance"]
    assert got["n_failing_tail"] == len(tail)
    assert got["failing_tail_us"] == pytest.approx(float(np.mean(imb)), abs=1e-3)


@pytest.mark.parametrize("where", ["incident", "fallbacks"])
def test_fallback_recompile_rates_count_what_the_events_hold(where: str, tmp_path: Path) -> None:
    """Counted against the Parquet events themselves: ops, flagged events and the distinct
    requests they touch (events without a request are not a request)."""
    import pyarrow.parquet as pq

    store = tmp_path / "store"
    if where == "incident":
        incident_store(store)
    else:
        write_run(store, RunSpec("comparator", seed=1, fallback_share=0.01))
        write_run(store, RunSpec("failing", seed=2, fallback_share=0.2, recompile_us=900.0))
    c = db.connect(store)
    try:
        rows = db.query(c, "fallback_recompile_rates", PAIR).to_pylist()
    finally:
        c.close()
    flagged_any = 0
    for r in rows:
        ev = pq.read_table(store / "events" / f"run_id={r['run_id']}").to_pydict()
        fb = [rid for rid, f in zip(ev["request_id"], ev["fallback"], strict=True) if f]
        rc = [rid for rid, f in zip(ev["request_id"], ev["recompile"], strict=True) if f]
        assert r["n_ops"] == sum(s is not None for s in ev["stage"])
        assert (r["fallback_ops"], r["recompile_events"]) == (len(fb), len(rc))
        assert r["requests_with_fallback"] == len({x for x in fb if x is not None})
        assert r["requests_with_recompile"] == len({x for x in rc if x is not None})
        flagged_any += len(fb) + len(rc)
    assert flagged_any > 0  # the store exercises the distinct counts


def test_compile_rows_fetched_once_serve_warmup_shapes_and_evidence(con) -> None:  # type: ignore[no-untyped-def]
    from workbench.store.arrays import compile_rows, compiled_shapes
    from workbench.triage.warmup import warmup_of

    fetched = compile_rows(con, "failing")
    assert fetched.phases.num_rows > 0  # the store's failing run recompiles
    assert warmup_of(con, "failing", fetched=fetched) == warmup_of(con, "failing")
    assert compiled_shapes(con, "failing", fetched) == compiled_shapes(con, "failing")
    given = evidence.EvidenceTable("compile_phases", fetched.params, fetched.phases)
    tables = evidence.pair_tables(con, "failing", "comparator", names=["compile_phases"])
    reused = evidence.pair_tables(
        con, "failing", "comparator", names=["compile_phases"], given=(given,)
    )
    assert reused["compile_phases"] is given  # not run again
    assert tables["compile_phases"].table.equals(given.table)
    assert tables["compile_phases"].parameters == given.parameters
    # A table of other parameters is refused, not passed off as this pair's.
    other = evidence.EvidenceTable("compile_phases", compile_rows(con, "comparator").params,
                                   fetched.phases)  # fmt: skip
    with pytest.raises(ValueError, match="compile_phases was given with"):
        evidence.pair_tables(con, "failing", "comparator", names=["compile_phases"], given=(other,))


def test_a_committed_run_is_one_whose_runs_row_is_written(con) -> None:  # type: ignore[no-untyped-def]
    assert run_exists(con, "failing") and run_presence(con, "failing")[0]
    assert not run_exists(con, "no-such-run") and run_presence(con, "no-such-run") == (False, 0)
