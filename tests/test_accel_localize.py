"""accel.localize on generated pairs: the right origin and mechanism, no alarm on A/A pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accel.cost import op_times
from accel.localize import TriggerPolicy, comparator_shares, localize, prepare_swaps, replayed
from accel.localize.swaps import placement_swap
from accel.ops import RunArrays
from accel.profiles import get_profile
from accel.stages import MECHANISMS, STAGES
from accel.synth import FAULTS, generate_pair

H100 = get_profile("h100")
TPU = get_profile("tpu-v5e")


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "none"])
def test_fixed_seed_faults_localize_right(fault: str) -> None:
    for hw, seed in ((H100, 7000), (TPU, 7001)):
        pair = generate_pair(hw, fault, seed=seed, tables=False)
        loc = localize(pair.failing.arrays, pair.comparator.arrays, hw)
        assert loc.triggered, (fault, hw.name)
        assert loc.origin_stage == pair.truth.origin_stage, (fault, hw.name, loc.decided_by)
        assert loc.mechanism == pair.truth.mechanism, (fault, hw.name)
        assert 0.0 < loc.confidence <= 1.0
        assert loc.p95_gap_ci[0] <= loc.p95_gap_us <= loc.p95_gap_ci[1]
        assert loc.p95_gap_ci[0] > 0 or loc.p99_gap_ci[0] > 0


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_aa_pairs_do_not_trigger(seed: int) -> None:
    for hw in (H100, TPU):
        pair = generate_pair(hw, "none", seed=seed, tables=False)
        loc = localize(pair.failing.arrays, pair.comparator.arrays, hw)
        assert not loc.triggered
        assert (loc.origin_stage, loc.manifest_stage, loc.mechanism) == (None, None, "none")
        assert loc.explained_share == {} and loc.confidence == 0.0
        assert loc.n_failing == loc.n_comparator == pair.failing.arrays.requests.size


def test_verdict_fields_and_claims() -> None:
    pair = generate_pair(H100, "fusion_memory_burst", seed=7000, tables=False)
    loc = localize(pair.failing.arrays, pair.comparator.arrays, H100)
    assert loc.origin_stage == "lowering" and loc.manifest_stage == "execution"
    assert loc.decided_by == "plan_swap"
    assert set(loc.explained_share) == set(STAGES)
    for share in loc.explained_share.values():
        assert set(share) == {"p95", "p99"} and all(math.isfinite(v) for v in share.values())
    assert loc.explained_share["lowering"]["p95"] >= 0.5
    assert loc.mechanism in MECHANISMS and loc.secondary_mechanism in (*MECHANISMS, None)
    assert loc.claims and all(c.text and c.method is not None for c in loc.claims)
    assert loc.claims[0].numbers["n_failing"] == pair.failing.arrays.requests.size


def test_a_replay_made_beforehand_gives_the_same_verdict() -> None:
    pair = generate_pair(H100, "fusion_memory_burst", seed=7000, tables=False)
    f, c = pair.failing.arrays, pair.comparator.arrays
    alone = localize(f, c, H100)
    early = replayed(f, H100, op_times(f.ops, H100))
    # repr: NaN figures (stages with no samples) compare unequal under ==
    both = (early, replayed(c, H100))
    assert repr(localize(f, c, H100, replays=(early, None))) == repr(alone)
    assert repr(localize(f, c, H100, replays=both)) == repr(alone)
    for wrong in ((both[1], None), (None, early), (replayed(f, TPU), None)):
        with pytest.raises(ValueError, match="is not of"):
            localize(f, c, H100, replays=wrong)


@pytest.mark.parametrize("fault", ["fusion_memory_burst", "mapping_fallback", "recompile"])
def test_swaps_prepared_beforehand_give_the_same_verdict(fault: str) -> None:
    pair = generate_pair(H100, fault, seed=7001, tables=False)
    f, c = pair.failing.arrays, pair.comparator.arrays
    alone = localize(f, c, H100)
    ready = prepare_swaps(f, c)
    assert ready.deltas is not None and set(ready.deltas) == {"compile", "kernel", "fusion", "all"}
    assert repr(localize(f, c, H100, prepared=ready)) == repr(alone)
    assert repr(localize(f, c, H100, prepared=lambda: ready)) == repr(alone)
    # The comparator's placement shares made beforehand (on its own op-name codes) give the
    # same placement swap, whether or not the failing run has names the comparator lacks.
    shares = comparator_shares(c.ops)
    assert shares is not None
    n_req, observed = f.requests.size, ready.base.observed_stage_us  # type: ignore[union-attr]
    alone_swap = placement_swap(f.ops, c.ops, n_req, observed, ready.match)
    assert np.array_equal(
        placement_swap(f.ops, c.ops, n_req, observed, ready.match, shares), alone_swap
    )
    assert np.array_equal(placement_swap(f.ops, c.ops, n_req, observed, None, shares), alone_swap)
    with_shares = prepare_swaps(f, c, shares)
    assert with_shares.placement_shares is shares
    assert repr(localize(f, c, H100, prepared=with_shares)) == repr(alone)
    with pytest.raises(ValueError, match="are not of"):
        localize(c, f, H100, prepared=ready)


def test_queueing_fools_the_naive_method_not_the_full_one() -> None:
    # A slow result assembly makes every later request wait: raw ingress time moves first.
    pair = generate_pair(H100, "assembly", seed=7000, tables=False)
    naive = localize(pair.failing.arrays, pair.comparator.arrays, H100, method="naive")
    full = localize(pair.failing.arrays, pair.comparator.arrays, H100)
    assert naive.origin_stage == "ingress"
    assert full.origin_stage == "assembly"


def test_a_lowering_origin_is_found_by_the_swap_or_else_by_the_changed_kernels() -> None:
    pair = generate_pair(TPU, "mapping_fallback", seed=7001, tables=False)
    no_swap = localize(pair.failing.arrays, pair.comparator.arrays, TPU, method="no_swap")
    full = localize(pair.failing.arrays, pair.comparator.arrays, TPU)
    assert (full.origin_stage, full.decided_by) == ("lowering", "plan_swap")
    # Without swaps, the kernels now run as fallbacks are the evidence (decisions.py).
    assert (no_swap.origin_stage, no_swap.decided_by) == ("lowering", "direct")
    assert no_swap.mechanism == "mapping_fallback"
    assert any("kernels the comparator never did" in c.text for c in no_swap.claims)


def test_sample_incident_localizes_to_its_known_cause() -> None:
    from workbench.sample.synthetic import sample_synth_runs

    runs = {spec.run_id: synth for spec, synth in sample_synth_runs()}
    comp = runs["comparator"].arrays
    for run_id in ("failing", "fixed-metadata"):
        loc = localize(runs[run_id].arrays, comp, H100)
        truth = runs[run_id].truth
        assert (loc.origin_stage, loc.manifest_stage, loc.mechanism) == (
            truth.origin_stage,
            truth.manifest_stage,
            truth.mechanism,
        )
    assert not localize(runs["candidate-rollback"].arrays, comp, H100).triggered


def test_a_lower_threshold_lets_a_mild_gap_trigger() -> None:
    pair = generate_pair(H100, "none", seed=3, tables=False)
    f, c = pair.failing.arrays, pair.comparator.arrays
    base = localize(f, c, H100)
    loc = localize(f, c, H100, TriggerPolicy(min_rel_gap=-1.0, check_comparator=False))
    # With no practical threshold, the interval alone decides.
    assert loc.triggered == (base.p95_gap_ci[0] > 0 or base.p99_gap_ci[0] > 0)
    strict = localize(f, c, H100, TriggerPolicy(min_rel_gap=10.0))
    assert strict.outcome == "no regression" and "threshold" in strict.outcome_reason


def test_unknown_method_is_refused() -> None:
    pair = generate_pair(H100, "none", seed=1, tables=False)
    with pytest.raises(ValueError, match="unknown method"):
        localize(pair.failing.arrays, pair.comparator.arrays, H100, method="guess")
    assert np.isfinite(pair.failing.arrays.requests.latency_us).all()


def test_degrades_without_names_batches_or_start_times() -> None:
    from dataclasses import replace

    pair = generate_pair(H100, "core_imbalance", seed=7000, tables=False)

    def strip(run: RunArrays) -> RunArrays:
        req = replace(run.requests, batch_id=None, start_us=np.full(run.requests.size, np.nan))
        return replace(run, ops=replace(run.ops, name=[], kernel=[]), requests=req)

    loc = localize(strip(pair.failing.arrays), strip(pair.comparator.arrays), H100)
    assert loc.triggered and loc.decided_by == "direct"
    # Without op names no plan can be swapped (and the verdict says so), but per-core busy
    # time still shows the imbalance: the truth, scheduling / core_imbalance.
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    assert any("swaps skipped" in c.text for c in loc.claims)


def test_across_hardware_the_profiles_speak_first_and_the_pair_is_inconclusive() -> None:
    pair = generate_pair(H100, "assembly", seed=7000, tables=False)
    f, c = pair.failing.arrays, pair.comparator.arrays
    loc = localize(f, c, H100, comparator_hw=TPU)
    assert loc.outcome == "inconclusive" and not loc.triggered
    assert loc.outcome_reason.startswith("hardware differs (h100 vs tpu-v5e)")
    hg = loc.hardware_gap
    # The comparator's ops predicted on the failing run's hardware against its own: a
    # non-zero prediction, and what is left of the observed gap.
    assert hg["predicted_gap_us"]["p95"] != 0.0
    assert hg["remaining_gap_us"]["p95"] == pytest.approx(
        loc.p95_gap_us - hg["predicted_gap_us"]["p95"], rel=1e-6
    )
    same = localize(f, c, H100, comparator_hw=H100)
    assert same.outcome == "regression" and same.hardware_gap == {}
