"""generators.profsim: its ground truth is consistent, faults show up where they were placed, and the
events-only trace imports into the same per-request stage times."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from accel.profiles import get_profile
from accel.stages import STAGES
from generators import profsim
from generators.profsim_io import add_run

HW = get_profile("h100")
N = 200
COLS = [f"{s}_us" for s in STAGES] + ["other_us", "latency_us"]


def pair(fault: str, batching: str = "serial", seed: int = 11) -> profsim.Pair:
    return profsim.generate_pair(HW, fault, seed, batching=batching, n_requests=N)


def mean_gap(p: profsim.Pair) -> np.ndarray:
    """Failing minus comparator mean per stage column (STAGES, other)."""
    f, c = p.failing.timeline.stage_us, p.comparator.timeline.stage_us
    return np.asarray(f.mean(axis=0) - c.mean(axis=0))


@pytest.mark.parametrize("batching", profsim.BATCHING)
@pytest.mark.parametrize("fault", profsim.FAULTS)
def test_stage_times_sum_to_latency_and_events_fill_the_window(fault: str, batching: str) -> None:
    p = pair(fault, batching)
    assert p.truth.mechanism == profsim.TRUTH[fault][2]
    for run in (p.failing, p.comparator):
        tl = run.timeline
        assert tl.stage_us.shape == (N, len(STAGES) + 1)
        assert (tl.stage_us >= 0).all()
        np.testing.assert_array_equal(tl.stage_us.sum(axis=1), tl.latency_us)
        ev = tl.events
        ann = ev["category"] == "user_annotation"
        ann &= np.char.startswith(ev["name"].astype(str), "request#")
        assert ann.sum() == N
        # Every event of a request lies inside its annotation.
        end = tl.arrival_us + tl.latency_us
        req = ev["req"]
        assert (ev["ts"] >= tl.arrival_us[req] - 1e-9).all()
        assert (ev["ts"] + ev["dur"] <= end[req] + 1e-9).all()


def test_serial_members_wait_for_their_batch_mates() -> None:
    """Served one after another: no two members of a batch overlap, a later member's wait for
    the earlier ones is ingress time, and nobody carries a batch-mate's service."""
    tl = pair("none", "serial").comparator.timeline
    order = np.argsort(tl.start_us)
    service = tl.stage_us[:, 1:5].sum(axis=1)
    ends = tl.start_us + service
    assert (tl.start_us[order][1:] >= ends[order][:-1] - 1e-9).all()
    multi = np.bincount(tl.batch_id)[tl.batch_id] > 1
    assert multi.any()
    ingress = tl.stage_us[:, 0]
    assert (ingress >= tl.start_us - tl.arrival_us - 1e-9).all()


def test_continuous_batching_runs_requests_side_by_side() -> None:
    tl = pair("none", "continuous").comparator.timeline
    assert (tl.batch_id == -1).all()
    assert tl.batch_size.max() > 1
    assert tl.batch_size.max() <= profsim.Service().slots


@pytest.mark.parametrize(
    ("fault", "column"),
    [
        ("queueing", 0),
        ("batch_policy", 0),
        ("recompile", 1),
        ("mapping_fallback", 3),
        ("fusion_memory_burst", 3),
        ("core_imbalance", 3),
        ("barrier_stall", 3),
        ("assembly", 4),
    ],
)
@pytest.mark.parametrize("batching", profsim.BATCHING)
def test_the_fault_shows_up_where_it_was_placed(fault: str, column: int, batching: str) -> None:
    p = pair(fault, batching)
    gap = mean_gap(p)
    aa = mean_gap(pair("none", batching))
    # The stage the truth names moved: by a tenth of its mean and twice what an A/A pair moves it.
    base = p.comparator.timeline.stage_us[:, column].mean()
    assert gap[column] > max(0.1 * base, 2 * abs(aa[column]), 1.0)
    manifest = profsim.TRUTH[fault][1]
    assert manifest == STAGES[column]


def test_barrier_stalls_sit_in_sync_spans_without_flops_or_bytes() -> None:
    f, c = (
        r.timeline.events for r in (pair("barrier_stall").failing, pair("barrier_stall").comparator)
    )
    for ev in (f, c):
        sync = ev["name"] == "cudaStreamSynchronize"
        assert np.isnan(ev["flops"][sync]).all() and np.isnan(ev["bytes"][sync]).all()
    # The sync spans also wait out the kernels still running; the stalls come on top.
    sync_f = f["dur"][f["name"] == "cudaStreamSynchronize"].mean()
    sync_c = c["dur"][c["name"] == "cudaStreamSynchronize"].mean()
    assert sync_f > 1.2 * sync_c
    # Kernels are the same size in both runs: the stall is not work.
    kf = np.median(f["dur"][f["category"] == "kernel"])
    kc = np.median(c["dur"][c["category"] == "kernel"])
    assert kf == pytest.approx(kc, rel=0.25)


def test_slow_core_is_an_intercept_on_every_kernel() -> None:
    p = pair("core_imbalance")
    slow = int(p.truth.magnitude["slow_core"])
    s = p.failing.service
    ev = p.failing.timeline.events
    # Kernels in generation order: (request, layer, op, core).
    dur = ev["dur"][ev["category"] == "kernel"].reshape(N, s.layers, -1, s.cores)
    others = np.delete(dur, slow, axis=3).mean(axis=3)
    extra = dur[..., slow] - others  # (request, layer, op)
    sizes = others.mean(axis=(0, 1))
    small, large = int(np.argmin(sizes)), int(np.argmax(sizes))
    assert sizes[large] > 3 * sizes[small]
    # The same extra time on the smallest and the largest kernel: an intercept, not a rate.
    assert np.median(extra[:, :, small]) > 0
    assert np.median(extra[:, :, small]) == pytest.approx(np.median(extra[:, :, large]), rel=0.3)


@pytest.mark.parametrize("batching", profsim.BATCHING)
def test_events_only_import_reproduces_the_stage_times(tmp_path: Path, batching: str) -> None:
    p = pair("recompile", batching)
    store = tmp_path / "store"
    add_run(store, p.failing, "as_store", "store", tmp_path)
    add_run(store, p.failing, "as_events", "events", tmp_path)
    con = duckdb.connect()
    got = {}
    for run_id in ("as_store", "as_events"):
        got[run_id] = con.sql(
            f"SELECT {', '.join(COLS)}, batch_id, shape_key FROM read_parquet($glob) ORDER BY name",
            params={"glob": str(store / "requests" / f"run_id={run_id}" / "*.parquet")},
        ).fetchall()
    assert len(got["as_events"]) == len(got["as_store"]) == N
    a = np.array([r[: len(COLS)] for r in got["as_store"]], dtype=np.float64)
    b = np.array([r[: len(COLS)] for r in got["as_events"]], dtype=np.float64)
    np.testing.assert_allclose(b, a, atol=1e-3)
    # What a profiler trace does not carry: batch ids. Shapes it does.
    assert {r[-2] for r in got["as_events"]} == {None}
    assert [r[-1] for r in got["as_events"]] == [r[-1] for r in got["as_store"]]
    # The compiles the generator placed are the importer's recompile spans.
    flagged = con.sql(
        "SELECT count(*) FROM read_parquet($glob) WHERE recompile",
        params={"glob": str(store / "events" / "run_id=as_events" / "*.parquet")},
    ).fetchall()
    placed = int((p.failing.timeline.events["name"] == "backend_compile").sum())
    assert flagged[0][0] == placed > 0
