"""The localization bench's "in sample" reading: each generator's fault-free twin of a failing
run (common random numbers), and the accuracy kept apart for pairs whose fault did not show."""

from __future__ import annotations

import json
import math
from types import ModuleType

import numpy as np
import pytest

from accel import synth
from accel.profiles import get_profile
from bench_scripts import bench_module
from generators import profsim
from localize_rows import bench_row

HW = get_profile("h100")


def bench() -> ModuleType:
    return bench_module("localize")


def report() -> ModuleType:
    return bench_module("localize_report")


@pytest.mark.parametrize("batching", profsim.BATCHING)
def test_profsim_twin_of_an_aa_pair_is_the_failing_run(batching: str) -> None:
    pair = profsim.generate_pair(HW, "none", 7, batching=batching, n_requests=200)
    twin = profsim.fault_free_twin(HW, pair, 7)
    # fault "none": the twin is the failing run itself, draw for draw
    assert np.array_equal(twin.latency_us, pair.failing.timeline.latency_us)
    assert np.array_equal(twin.arrival_us, pair.failing.timeline.arrival_us)
    assert not np.array_equal(twin.latency_us, pair.comparator.timeline.latency_us)


def test_profsim_twin_keeps_the_traffic_and_drops_the_fault() -> None:
    pair = profsim.generate_pair(HW, "fusion_memory_burst", 11, batching="serial", n_requests=300)
    twin = profsim.fault_free_twin(HW, pair, 11)
    # the same requests at the same times: only the fault's own work differs
    assert np.array_equal(twin.arrival_us, pair.failing.timeline.arrival_us)
    assert np.array_equal(twin.seq, pair.failing.timeline.seq)
    row = bench()._in_sample(pair.failing.timeline.latency_us, twin.latency_us)
    assert row["in_sample"] is True and float(str(row["effect_p95"])) > 0.5


@pytest.mark.parametrize("tables", [True, False])
def test_synth_twin_of_an_aa_pair_is_the_failing_run(tables: bool) -> None:
    wl = synth.Workload(n_requests=200)
    pair = synth.generate_pair(HW, "none", 5, workload=wl, tables=tables)
    twin = synth.fault_free_twin(HW, pair, 5, workload=wl)
    got, want = twin.arrays.requests.latency_us, pair.failing.arrays.requests.latency_us
    assert np.array_equal(got, want)


def test_synth_twin_keeps_the_traffic_and_drops_the_fault() -> None:
    wl = synth.Workload(n_requests=200)
    pair = synth.generate_pair(HW, "recompile", 3, workload=wl, tables=False)
    twin = synth.fault_free_twin(HW, pair, 3, workload=wl)
    failing, free = pair.failing.arrays.requests, twin.arrays.requests
    assert np.array_equal(free.arrival_us, failing.arrival_us)
    assert not np.array_equal(free.latency_us, failing.latency_us)
    row = bench()._in_sample(failing.latency_us, free.latency_us)
    assert row["in_sample"] is True and float(str(row["effect_p99"])) > 1.0


def test_in_sample_reads_the_trigger_threshold_at_either_quantile() -> None:
    b = bench()
    twin = np.arange(1, 1001, dtype=np.float64)
    slow_tail = twin.copy()
    slow_tail[-12:] *= 1.5  # p99 only (p95 reads below the last 50)
    row = b._in_sample(slow_tail, twin)
    assert row["effect_p95"] == 0.0 and float(str(row["effect_p99"])) > 0.05
    assert row["in_sample"] is True
    row = b._in_sample(twin * 1.04, twin)  # +4%: under the 5% threshold
    assert row["in_sample"] is False and math.isclose(float(str(row["effect_p95"])), 0.04)


def test_summary_keeps_pairs_whose_fault_did_not_show_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [
        bench_row("assembly", s, 1, "assembly", "regression", in_sample=True) for s in range(19)
    ]
    rows.append(
        bench_row("assembly", 19, 1, "none", "inconclusive", in_sample=True)
    )  # a power miss
    rows += [
        bench_row("assembly", 20 + s, 1, "none", "inconclusive", in_sample=False) for s in range(3)
    ]
    rows.append(bench_row("assembly", 23, 1, "none", "no regression", in_sample=False))
    rows += [
        bench_row("none", 30 + s, 1, "none", "no regression", in_sample=False) for s in range(20)
    ]
    fig = report().summary(rows, "test")
    cell = fig["cells"]["profsim/store"]
    assert cell["full"]["n"] == 24 and cell["full"]["origin_accuracy"] == pytest.approx(19 / 24)
    shown = cell["in_sample"]
    assert shown["n"] == 20 and shown["origin_accuracy"] == pytest.approx(19 / 20)
    assert shown["not_in_sample"] == 4
    assert shown["not_in_sample_outcomes"] == {"inconclusive": 3, "no regression": 1}
    # the other cells have no rows: neither target can be met over every cell
    assert fig["targets_met"] is False and fig["targets_met_in_sample"] is False
    json.dumps(fig)  # the bench prints these figures as its JSON line
    out = capsys.readouterr().out
    assert "whose fault showed on their own traffic" in out
