"""Witnessed mechanisms (issue 34, item 3) and the tail-exceedance test (item 4).

Every mechanism is walked on real traces: a CPU torch.compile pair holds no barrier, core,
fusion-tier or byte events, so those mechanisms cannot be named on it; the HTA training trace
holds NCCL collectives, which witness barrier_stall. Every triage of a pair in tests/fixtures and
of the sample store names a mechanism only with its witness, cited in the proof list with n.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel.localize.events.witness import SIBLINGS, UNKNOWN, barrier_ops, witness, witnessed
from accel.localize.exceedance import binom_sf, chi2_ppf, exceedance
from accel.ops import RunArrays
from accel.stages import MECHANISMS
from workbench.cli.main import main
from workbench.store import db
from workbench.store.ingest import ingest
from workbench.triage import lanes
from workbench.triage.context import load_present
from workbench.triage.warmup import warmup_of

ROOT = Path(__file__).resolve().parents[1]
TORCH = ROOT / "tests" / "fixtures" / "torch"
SHARED = ROOT.parent / "shared" / "traces"
SAMPLE = ROOT / "sample_traces"
PAIRS = {
    "graph_break": ("graph_break_failing", "graph_break_comparator"),
    "aa": ("aa_second", "aa_first"),
    "serving": ("serving_static_failing", "serving_dynamic_comparator"),
    "rerun": ("serving_static_failing", "serving_static_rerun"),
}
# Mechanisms whose witnesses a CPU-only torch trace cannot hold.
NOT_ON_CPU = ("barrier_stall", "core_imbalance", "fusion_memory_burst")
REAL_PAIRS = ROOT / "tests" / "fixtures" / "real_pairs"


@pytest.fixture(scope="module")
def torch_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("witness") / "store"
    for stem in sorted({s for pair in PAIRS.values() for s in pair}):
        ingest(root, TORCH / f"{stem}.pt.trace.json.gz", run_id=stem,
               compile_log=TORCH / f"{stem}.torch_trace")  # fmt: skip
    return root


def arrays(store: Path, run_id: str) -> RunArrays:
    """The run's steady state, loaded as triage loads it (warm-up requests left out)."""
    con = db.connect(store)
    try:
        run = load_present(con, run_id)[run_id]
        return lanes.load_steady(con, run, warmup_of(con, run_id))
    finally:
        con.close()


def triage(store: Path, failing: str, comparator: str, capsys: Any) -> dict[str, Any]:
    argv = ["triage", "--store", str(store), "--failing", failing, "--comparator", comparator]
    assert main([*argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_every_mechanism_on_a_cpu_pair_is_named_only_with_its_events(torch_store: Path) -> None:
    f = arrays(torch_store, "graph_break_failing")
    c = arrays(torch_store, "graph_break_comparator")
    own = {}
    for mech in MECHANISMS:
        name, w = witnessed(mech, f, c)
        own[mech] = witness(mech, f, c) is not None
        if mech in ("none", UNKNOWN):
            assert (name, w) == (mech, None)
        elif w is None:
            assert name == UNKNOWN
        else:
            # Named only with its own witness, or a witnessed sibling of the same stage.
            assert name == w.mechanism and name in (mech, *SIBLINGS.get(mech, ()))
            assert w.n_failing > 0 and "n=" in w.text()
    # No barrier, per-core or fusion-tier events in a CPU profiler trace; recorded with shapes,
    # its ops carry the sizes of their inputs, which witness bandwidth_bound.
    assert not any(own[m] for m in NOT_ON_CPU), own
    assert own["bandwidth_bound"]
    assert np.isfinite(f.ops.m).any() and not np.isfinite(f.ops.bytes).any()
    assert all(witnessed(m, f, c)[0] == UNKNOWN for m in NOT_ON_CPU if m not in SIBLINGS)
    assert not barrier_ops(f.ops).any()
    # The split graph: what the trace does hold. Its extra ops per request add more time than
    # that many small launches would (the eager checks and the regions' wrappers), so it is no
    # launch overhead; no request waits (no queue), none runs an eager fallback op, and none
    # compiles while serving (dynamic=True, warm shapes only).
    assert own["graph_break"]
    assert not (own["launch_overhead"] or own["queueing"] or own["mapping_fallback"])
    assert not own["recompile"]
    # Evidence pointing at a recompile here names the split graph the trace does witness.
    assert witnessed("recompile", f, c)[0] == "graph_break"


def test_bandwidth_bound_is_not_named_on_a_trace_without_sizes(tmp_path: Path) -> None:
    # The real-pair fixtures were recorded without shapes: no bytes, no input sizes.
    store = tmp_path / "store"
    for role in ("failing", "comparator"):
        stem = f"fixture-break_print.{role}"
        ingest(store, REAL_PAIRS / f"{stem}.pt.trace.json.gz", run_id=stem)
    f = arrays(store, "fixture-break_print.failing")
    c = arrays(store, "fixture-break_print.comparator")
    assert not np.isfinite(f.ops.m).any()
    assert witness("bandwidth_bound", f, c) is None
    assert witnessed("bandwidth_bound", f, c) == (UNKNOWN, None)


def test_recompile_is_witnessed_by_compilations_while_serving(torch_store: Path) -> None:
    f = arrays(torch_store, "serving_static_failing")
    c = arrays(torch_store, "serving_dynamic_comparator")
    w = witness("recompile", f, c)
    assert w is not None and w.n_failing > w.n_comparator


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/traces is absent")
def test_nccl_collectives_witness_barrier_stall(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ingest(store, SHARED / "rank0.json.gz", run_id="rank0")
    run = arrays(store, "rank0")
    ops = barrier_ops(run.ops)
    assert ops.any()
    w = witness("barrier_stall", run, run)
    assert w is not None and w.n_failing == int(ops.sum())


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_fixture_triage_names_no_mechanism_without_its_witness(
    torch_store: Path, pair: str, capsys: Any
) -> None:
    failing, comparator = PAIRS[pair]
    doc = triage(torch_store, failing, comparator, capsys)
    mech = doc["mechanism"]
    texts = [c["text"] for c in doc["claims"]]
    if mech in ("none", UNKNOWN):
        return
    w = witness(mech, arrays(torch_store, failing), arrays(torch_store, comparator))
    assert w is not None, (pair, mech)
    assert any(t.startswith(f"mechanism {mech} rests on ") and "n=" in t for t in texts)
    assert mech not in NOT_ON_CPU, (pair, mech)


def test_sample_store_mechanism_cites_its_witness(capsys: Any) -> None:
    doc = triage(SAMPLE, "failing", "comparator", capsys)
    assert doc["mechanism"] not in ("none", UNKNOWN)
    cited = [c["text"] for c in doc["claims"] if c["text"].startswith("mechanism ")]
    assert cited and f"mechanism {doc['mechanism']} rests on" in cited[0] and "n=" in cited[0]


def test_binomial_tail_and_chi2_quantile_match_known_values() -> None:
    # P(X >= 3), X ~ Bin(10, 0.2) = 1 - (0.8^10 + 10*0.2*0.8^9 + 45*0.04*0.8^8)
    exact = 1 - (0.8**10 + 10 * 0.2 * 0.8**9 + 45 * 0.04 * 0.8**8)
    assert binom_sf(3, 10, 0.2) == pytest.approx(exact, rel=1e-12)
    assert binom_sf(0, 10, 0.2) == 1.0 and binom_sf(11, 10, 0.2) == 0.0
    # scipy.stats.chi2.ppf(0.05, 20) = 10.8508, chi2.ppf(0.95, 40) = 55.7585
    assert chi2_ppf(0.05, 20) == pytest.approx(10.8508, rel=0.01)
    assert chi2_ppf(0.95, 40) == pytest.approx(55.7585, rel=0.01)


def test_a_few_requests_far_past_the_comparator_are_a_regression_at_n_77() -> None:
    rng = np.random.default_rng(7)
    comparator = rng.lognormal(math.log(80e3), 0.2, 79)
    failing = rng.lognormal(math.log(80e3), 0.2, 77)
    failing[[10, 30, 50, 70]] = 3.0e6  # four requests recompiling for seconds
    e = exceedance(failing, comparator, 0.005)
    assert e is not None and e.exceed_failing == 4 and e.p_value < 1e-6
    assert "4 of 77 failing requests exceed" in e.text()
    # Without them it cannot be read: nothing past the comparator's slowest three times.
    failing[[10, 30, 50, 70]] = 80e3
    got = exceedance(failing, comparator, 0.005)
    assert got is None or got.p_value > 0.005


def test_exceedance_rarely_alarms_on_a_a_pairs_even_with_heavy_tails() -> None:
    rng = np.random.default_rng(11)
    alarms = 0
    trials = 400
    for _ in range(trials):
        a, b = rng.pareto(1.5, 200) + 1.0, rng.pareto(1.5, 200) + 1.0
        e = exceedance(a, b, 0.005)
        alarms += e is not None and e.p_value < 0.005
    # Nominal 0.5%: at most 2.5% of 400 (a binomial upper bound far above the nominal rate).
    assert alarms <= 10
