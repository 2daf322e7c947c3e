"""accel.localize.confidence: the origin decision and its bootstrap agreement."""

from __future__ import annotations

import numpy as np

from accel.localize.confidence import Candidate, decide, origin_agreement

RNG = np.random.default_rng(5)
N = 400
LC = RNG.lognormal(np.log(1000), 0.2, N)
LF = LC * 1.5  # every request 50% slower: the gap is the whole tail
OWN_C = np.tile(LC[:, None] / 5, (1, 5))
OWN_F = OWN_C.copy()
OWN_F[:, 3] += LF - LC  # the time shows up in execution


def _cand(stage: str, source: str, removed_share: float, eligible: bool = True) -> Candidate:
    # A counterfactual that takes `removed_share` of each request's extra time away.
    return Candidate(stage, source, stage, LF, LF - removed_share * (LF - LC), eligible, 0.5)


def test_first_passing_stage_in_pipeline_order_wins() -> None:
    cands = [_cand("execution", "residual", 0.9), _cand("lowering", "plan_swap", 0.8)]
    d = decide(cands, LF, LC, OWN_F, OWN_C)
    assert (d.origin, d.decided_by, d.candidate) == ("lowering", "plan_swap", 1)
    assert d.shares[0] == np.float64(d.shares[0]) and abs(d.shares[1] - 0.8) < 1e-9


def test_ineligible_or_too_small_evidence_falls_back_to_the_manifest() -> None:
    cands = [_cand("lowering", "residual", 0.9, eligible=False), _cand("assembly", "direct", 0.3)]
    d = decide(cands, LF, LC, OWN_F, OWN_C)
    assert (d.origin, d.decided_by, d.candidate) == ("execution", "manifest", -1)


def test_agreement_is_high_for_clear_evidence_and_middling_at_the_threshold() -> None:
    clear = [_cand("lowering", "plan_swap", 0.95)]
    assert origin_agreement(clear, LF, LC, OWN_F, OWN_C, "lowering") == 1.0
    # A counterfactual removing a random part of each request's extra time, about half of
    # the gap at the tail: resamples fall on both sides of the threshold.
    cf = LF - RNG.uniform(0.0, 1.0, N) * (LF - LC)
    share = decide(
        [Candidate("lowering", "plan_swap", "", LF, cf, True, 0.0)], LF, LC, OWN_F, OWN_C
    )
    # Its threshold at its own share on the full runs: about half the resamples pass.
    edge = [Candidate("lowering", "plan_swap", "lowering", LF, cf, True, share.shares[0])]
    a = origin_agreement(edge, LF, LC, OWN_F, OWN_C, "lowering", n_resamples=80)
    assert 0.1 < a < 0.9
