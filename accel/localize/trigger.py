"""The trigger: is the failing run's tail worse than the comparator's, by enough to matter?

A regression is declared when, for p95 or p99, the gap's (1 - alpha) interval excludes zero
AND the gap exceeds a practical threshold (default: a share of the comparator's quantile; with
an SLO: a share of the SLO, when larger). The interval is a moving-block bootstrap whose block
length comes from each run's own autocorrelation, widened where the queue reaches the tail to
the queue bootstrap's (queue_bootstrap.py: the run-to-run variance of the queue's trajectory,
which no within-run resample holds), and the comparator is checked against itself
(its first half against its second by the same rule): both calibrations come from the data at
hand. The further readings below spend half the error rate between them (Bonferroni): each at
1 - alpha/4 where a pair can be read twice (equal traffic, then the queue-free tail), else at
1 - alpha/2. When the observed gaps do not fire and the arrival rates do not differ, the same
rule reads the gaps at equal traffic (equal_traffic.py: both services replayed on one traffic),
since two draws of one traffic can hide a slower service; where that does not fire either, the
same rule reads the queue-free tail, each request's latency minus its waits for a server busy
with other requests: what is left, its service and its
batch's formation (the batcher's hold, batch-mates arriving), is the request's own path, and the
queue's trajectory, which swings the latency tail of a few hundred requests from run to run, is
not in it; its practical threshold is the same share of the comparator's queue-free quantile,
and it counts only where the gap at equal traffic is not below zero (a longer hold can fill
batches and shorten the queue: the queue gives it back). Where the arrival rates differ and
the failing run got less traffic, the queue-free tail is read on the service alone (at that
load its batches wait longer for their mates; a lighter load does not make the service
slower). Where the failing run's requests arrive significantly faster instead, the same rule
reads the gap that change of load makes (load_change.py: the comparator's own service
replayed at both rates, on the same jobs and traffic), where the observed gap
passes the threshold too. A gap past the threshold whose interval includes zero is
"inconclusive" (too few requests to tell, with how many would), not "no regression".
Outcomes: "regression", "no regression" or "inconclusive", each with its reason; the
intervals reported are the ones the decision used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Final

import numpy as np

from accel.block_bootstrap import block_bootstrap_quantile_diffs, block_length
from accel.localize.equal_traffic import EqualTraffic, equal_traffic_gaps
from accel.localize.exceedance import Exceedance, exceedance
from accel.localize.gaps import QNAMES, QS, at_q
from accel.localize.load_change import load_gaps
from accel.localize.queue_bootstrap import queue_gap_intervals
from accel.localize.requeue import QueueState, arrival_rate, queue_free, same_arrival_rate
from accel.ops import F64
from accel.stats import level_text

REGRESSION: Final[str] = "regression"
NO_REGRESSION: Final[str] = "no regression"
INCONCLUSIVE: Final[str] = "inconclusive"
OUTCOMES: Final[tuple[str, ...]] = (REGRESSION, NO_REGRESSION, INCONCLUSIVE)
# the tail-exceedance test's share of alpha (a further reading; its p-values on real
# storms are far below it)
EXCEEDANCE_SHARE: Final[float] = 0.1
_POWER: Final[float] = 0.8  # "more requests" estimates aim at this chance of confirming a gap


@dataclass(frozen=True)
class TriggerPolicy:
    """What counts as a regression; every field can be set by the user."""

    min_rel_gap: float = 0.05  # practical threshold: this share of the comparator's quantile
    slo_share: float = 0.02  # with an SLO: at least this share of it (the larger one applies)
    sla_us: float | None = None  # the service's latency SLO, when the runs carry one
    alpha: float = 0.05  # intervals are (1 - alpha)
    min_requests: int = 20  # fewer in either run: inconclusive
    check_comparator: bool = True  # the comparator's halves must not differ by the same rule
    # where the queue reaches the tail, widen intervals to the queue bootstrap's (callers pass
    # the runs' queues; see tail_gaps)
    queue_bootstrap: bool = True
    # there too, when the observed gaps do not fire and the arrival rates do not differ, read
    # the gap at equal traffic (equal_traffic.py) by the same rule
    equal_traffic: bool = True
    # there too, when neither fired, read the queue-free tail (each request's latency minus its
    # waits for a server busy with other requests) by the same rule
    queue_free_tail: bool = True
    # where the queue reaches the tail and the failing run's requests arrive significantly
    # faster, read the gap that change of load makes (load_change.py) by the same rule
    load_change: bool = True
    # last, where nothing fired: a few failing requests far past the comparator's slowest,
    # against what its own tail allows (exceedance.py)
    tail_exceedance: bool = True


@dataclass(frozen=True)
class TailGaps:
    """Per quantile name (QNAMES): failing - comparator gap, its interval, the relative gap."""

    gap: dict[str, float]
    ci: dict[str, tuple[float, float]]
    rel: dict[str, float]
    block: tuple[int, int] = (1, 1)  # bootstrap block lengths of failing and comparator
    # The queue bootstrap's intervals when it was run (ci is then the union with the block's).
    queue_ci: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Trigger:
    """The trigger's decision, its reason and the figures it read."""

    outcome: str
    reason: str
    gaps: TailGaps
    threshold_us: dict[str, float]
    threshold_basis: str
    fired: list[str]
    comparator_halves: dict[str, float] = field(default_factory=dict)
    # inconclusive for too few requests: how many a run would need (requests_needed)
    requests_needed: int | None = None
    # the gaps at equal traffic, when they were read (see TriggerPolicy.equal_traffic)
    equal_traffic: EqualTraffic | None = None
    at_equal_traffic: bool = False  # fired on them, not on the observed gaps
    # the queue-free tail's gaps, when they were read (see TriggerPolicy.queue_free_tail)
    queue_free_tail: TailGaps | None = None
    at_queue_free_tail: bool = False  # fired on them, not on the observed or equal-traffic gaps
    # their practical thresholds: the policy's share of the comparator's queue-free quantile
    queue_free_threshold_us: dict[str, float] = field(default_factory=dict)
    # the gaps the change of load makes, when they were read (see TriggerPolicy.load_change),
    # and the failing run's arrival rate over the comparator's
    load_change: EqualTraffic | None = None
    at_load_change: bool = False  # fired on them (the observed gaps past the threshold)
    rate_ratio: float = math.nan
    # the queue-free tail kept each batch's formation; without it (the failing run got less
    # traffic) it is the service alone
    queue_free_formation: bool = True
    # the confidence level of the further readings' intervals (further_alpha)
    further_level: float = 0.975
    # the tail-exceedance test (exceedance.py), when it was read, and whether it decided
    exceedance: Exceedance | None = None
    at_exceedance: bool = False

    @property
    def regression(self) -> bool:
        return self.outcome == REGRESSION


def tail_gaps(
    lf: F64,
    lc: F64,
    n_boot: int,
    seed: int,
    alpha: float = 0.05,
    queues: tuple[QueueState, QueueState] | None = None,
) -> TailGaps:
    """The p95/p99 latency gaps of failing (lf) over comparator (lc), both in arrival order,
    with moving-block bootstrap intervals; with `queues` (each run's observed queue, where the
    re-run reproduces it), each interval is widened to hold the queue bootstrap's too: a
    block resample of one run misses the variance of the queue's trajectory."""
    lengths = (block_length(lf), block_length(lc))
    gaps: dict[str, float] = {}
    cis: dict[str, tuple[float, float]] = {}
    rel: dict[str, float] = {}
    found = block_bootstrap_quantile_diffs(
        lf, lc, QS, n_boot=n_boot, seed=seed, alpha=alpha, lengths=lengths
    )
    for q, name, (d, lo, hi) in zip(QS, QNAMES, found, strict=True):
        gaps[name], cis[name] = d, (lo, hi)
        base = at_q(lc, q)
        rel[name] = d / base if base > 0 else math.nan
    queue_ci: dict[str, tuple[float, float]] = {}
    if queues is not None:
        model = queue_gap_intervals(
            *queues, [gaps[n] for n in QNAMES], QS, n_boot=n_boot, seed=seed + 29, alpha=alpha
        )
        for name, (lo, hi) in zip(QNAMES, model, strict=True):
            if math.isfinite(lo) and math.isfinite(hi):
                queue_ci[name] = (lo, hi)
                cis[name] = (min(cis[name][0], lo), max(cis[name][1], hi))
    return TailGaps(gaps, cis, rel, lengths, queue_ci)


def thresholds(lc: F64, policy: TriggerPolicy) -> tuple[dict[str, float], str]:
    """Practical threshold per quantile in us, and what it is."""
    out = {n: policy.min_rel_gap * at_q(lc, q) for q, n in zip(QS, QNAMES, strict=True)}
    basis = f"{policy.min_rel_gap:.0%} of the comparator's quantile"
    sla = policy.sla_us
    if sla is not None and math.isfinite(sla) and sla > 0:
        slo = policy.slo_share * sla
        if slo > min(out.values()):
            basis += f", at least {policy.slo_share:.0%} of the SLO {sla:.0f} us"
        out = {n: max(v, slo) for n, v in out.items()}
    return out, basis


def gap_outcome(gap: float, lo: float, limit: float) -> str:
    """One tail gap against its practical threshold: a regression when the gap passes it and
    its interval excludes zero; inconclusive when it passes it but the interval includes zero
    (the estimate says regression, the requests cannot confirm it); else no regression."""
    if not gap > limit:
        return NO_REGRESSION
    return REGRESSION if lo > 0 else INCONCLUSIVE


def _fired(tg: TailGaps, limit: dict[str, float]) -> list[str]:
    return [n for n in QNAMES if gap_outcome(tg.gap[n], tg.ci[n][0], limit[n]) == REGRESSION]


def requests_needed(tg: TailGaps, q: str, n: int, alpha: float) -> int | None:
    """Requests a run needs for the interval at q to clear zero at this gap 4 times in 5, were
    its width to shrink as 1/sqrt(n) (the usual power calculation), to the next 10; None when
    the interval or the gap gives nothing to scale."""
    lo, hi = tg.ci[q]
    half, gap = (hi - lo) / 2.0, tg.gap[q]
    if not (math.isfinite(half) and half > 0 and gap > 0):
        return None
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    se = half / z
    need = n * ((z + NormalDist().inv_cdf(_POWER)) * se / gap) ** 2
    return int(math.ceil(need / 10.0) * 10)


def _reading(g: TailGaps, observed: TailGaps, queue_free: TailGaps | None) -> str:
    """Which reading a gap is of, as the verdict names it."""
    if g is observed:
        return ""
    return " in the queue-free tail" if g is queue_free else " at equal traffic"


def _more_requests(needed: int | None) -> str:
    if needed is None:
        return "more requests needed"
    return f"about {needed} requests a run would confirm a gap this size"


def _queue_free_in_arrival_order(q: QueueState, formation: bool) -> F64:
    """A run's queue-free latencies (requeue.queue_free) in arrival order, as tail_gaps reads
    latencies."""
    return queue_free(q, formation)[np.argsort(q.arrival, kind="stable")]


def _arrivals(queues: tuple[QueueState, QueueState]) -> tuple[F64, F64]:
    return queues[0].arrival, queues[1].arrival


def _faster(failing: F64, comparator: F64) -> bool:
    """Whether the failing run's requests arrived at a higher rate than the comparator's."""
    return bool(arrival_rate(failing) > arrival_rate(comparator))


def further_alpha(policy: TriggerPolicy, both: bool) -> float:
    """The error rate of each further reading: they share half the policy's (Bonferroni), so
    alpha/4 where a pair can be read at equal traffic and in the queue-free tail (`both`)."""
    return policy.alpha / (4.0 if both and policy.equal_traffic and policy.queue_free_tail else 2.0)


def decide(
    lf: F64,
    lc: F64,
    policy: TriggerPolicy,
    *,
    n_boot: int,
    seed: int,
    context: tuple[str, ...] = (),
    queues: tuple[QueueState, QueueState] | None = None,
) -> Trigger:
    """The trigger on the latencies of failing (lf) and comparator (lc) in arrival order.

    `context`: reasons known outside the latencies that make the pair inconclusive (hardware
    or locked tags that differ beyond what the model accounts for). `queues`: both runs'
    observed queues, given where the queue re-run reproduces them (see tail_gaps); the gaps
    at equal traffic, then those of the queue-free tail, are read on them when the observed gaps
    do not fire."""
    lf = np.asarray(lf, dtype=np.float64)
    lc = np.asarray(lc, dtype=np.float64)
    tg = tail_gaps(lf, lc, n_boot, seed, policy.alpha, queues)
    limit, basis = thresholds(lc, policy)
    fired = _fired(tg, limit)
    equal: EqualTraffic | None = None
    n = min(lf.size, lc.size)
    # Further readings where the queue model holds both runs: at equal traffic and in the
    # queue-free tail where the arrival rates agree; where they do not, at the failing run's
    # load (it got more traffic) or in the service tail (less).
    modelled = not fired and queues is not None and n >= policy.min_requests and not context
    # (`further`: the rates agree, so equal traffic and the queue-free tail can be read)
    further = (
        modelled and queues is not None and same_arrival_rate(*_arrivals(queues), policy.alpha)
    )
    faster = modelled and not further and queues is not None and _faster(*_arrivals(queues))
    # Each further reading spends a share of the error rate (further_alpha): on A/A pairs of
    # accel.synth at 600 requests, two readings at alpha/2 each let 5% of pairs alarm.
    f_alpha = further_alpha(policy, further)
    if further and queues is not None and policy.equal_traffic:
        # Near saturation two draws of one traffic queue differently; both services on the
        # same arrivals compare the service alone, by the same rule.
        equal = equal_traffic_gaps(*queues, QS, QNAMES, n_boot, seed + 41, f_alpha)
        fired = [
            q for q in QNAMES if gap_outcome(equal.gap[q], equal.ci[q][0], limit[q]) == REGRESSION
        ]
    at_equal = bool(fired) and equal is not None
    queue_free: TailGaps | None = None
    own_queue_free: F64 | None = None  # the comparator's, for its check below
    given_back: list[str] = []  # quantiles where it passes the rule but equal traffic is < 0
    qf_limit: dict[str, float] = {}
    # The failing run got less traffic: its batches waited longer for their mates, so the
    # queue-free tail is read without formation, on the service alone (a lighter load does not
    # make the service slower: fewer requests contend, batches are smaller).
    lighter = modelled and not further and not faster
    if (further or lighter) and not fired and queues is not None and policy.queue_free_tail:
        # Where equal traffic did not fire either, at the same level.
        own_queue_free = _queue_free_in_arrival_order(queues[1], not lighter)
        mine = _queue_free_in_arrival_order(queues[0], not lighter)
        queue_free = tail_gaps(mine, own_queue_free, n_boot, seed + 53, f_alpha)
        # The reading's own scale: a share of the comparator's queue-free quantile, as the
        # observed gaps take a share of its latency's (where the queue reaches the tail, the
        # latency's is mostly the queue, which this reading sets aside).
        qf_limit, _ = thresholds(own_queue_free, policy)
        held = _fired(queue_free, qf_limit)
        # A batcher that holds requests longer can fill batches and shorten the queue: where
        # the gap at equal traffic, queue included, is below zero, the queue gives it back.
        fired = [q for q in held if equal is None or equal.gap[q] >= 0]
        given_back = [q for q in held if q not in fired]
    at_queue_free = bool(fired) and queue_free is not None
    load: EqualTraffic | None = None
    ratio = math.nan
    if faster and not fired and queues is not None and policy.load_change:
        # The failing run got more traffic. The observed gaps mix two draws of the queue's
        # trajectory; the comparator's own service at both rates isolates what the load does.
        # It counts where the observed gap passes the threshold too: the load explains a
        # regression the requests show, not one they do not.
        load, ratio = load_gaps(*queues, QS, QNAMES, n_boot, seed + 67, f_alpha)
        fired = [
            q
            for q in QNAMES
            if tg.gap[q] > limit[q]
            and gap_outcome(load.gap[q], load.ci[q][0], limit[q]) == REGRESSION
        ]
    at_load = bool(fired) and load is not None
    exceeded: Exceedance | None = None
    if policy.tail_exceedance and not fired and n >= policy.min_requests and not context:
        # Last: a few requests far past anything the comparator did, which the quantile
        # intervals cannot confirm at this n. Its own small share of the error rate.
        # Where the queue model holds both runs, on each request's queue-free latency: the
        # queue turns one slow request into many late ones, and two draws of one traffic
        # queue differently near saturation.
        xf, xc = (
            (
                _queue_free_in_arrival_order(queues[0], True),
                _queue_free_in_arrival_order(queues[1], True),
            )
            if queues is not None
            else (lf, lc)
        )
        exceeded = exceedance(xf, xc, policy.alpha * EXCEEDANCE_SHARE)
        if exceeded is not None and exceeded.p_value < policy.alpha * EXCEEDANCE_SHARE:
            fired = [q for q in QNAMES if tg.gap[q] > limit[q]]
    at_exceed = bool(fired) and exceeded is not None

    def make(
        outcome: str,
        reason: str,
        halves: dict[str, float] | None = None,
        needed: int | None = None,
    ) -> Trigger:
        return Trigger(outcome, reason, tg, limit, basis, fired, halves or {}, needed, equal,
                       at_equal, queue_free, at_queue_free, qf_limit, load, at_load,
                       ratio, not lighter, 1.0 - f_alpha, exceeded, at_exceed)  # fmt: skip

    if n < policy.min_requests:
        return make(INCONCLUSIVE, f"too few requests ({n} < {policy.min_requests} in a run)")
    if context:
        return make(INCONCLUSIVE, "; ".join(context))
    gap_text = "; ".join(
        f"{q} gap {tg.gap[q]:+.0f} us ({1 - policy.alpha:.0%} CI {tg.ci[q][0]:+.0f}.."
        f"{tg.ci[q][1]:+.0f}) vs threshold {limit[q]:.0f} us"
        for q in QNAMES
    )
    if equal is not None:
        gap_text += "; at equal traffic (both services replayed on the same arrivals, " + (
            f"{equal.replays} replays): "
            + "; ".join(
                f"{q} gap {equal.gap[q]:+.0f} us ({level_text(1.0 - f_alpha)} CI "
                f"{equal.ci[q][0]:+.0f}..{equal.ci[q][1]:+.0f})"
                for q in QNAMES
            )
            + ")"
        )
    if queue_free is not None:
        qf_words = "service" if lighter else "queue-free"
        gap_text += (
            "; queue-free tail (each request's latency minus its waits for a server busy with "
            "other requests"
            + (
                " and for its batch to form, which is longer where, as here, the failing run "
                "got less traffic: the service alone"
                if lighter
                else ""
            )
            + "): "
            + "; ".join(
                f"{q} gap {queue_free.gap[q]:+.0f} us ({level_text(1.0 - f_alpha)} CI "
                f"{queue_free.ci[q][0]:+.0f}..{queue_free.ci[q][1]:+.0f}) vs threshold "
                f"{qf_limit[q]:.0f} us"
                for q in QNAMES
            )
            + f" ({basis.replace('quantile', qf_words + ' quantile')})"
        )
    if load is not None:
        gap_text += (
            f"; at the failing run's load (its requests arrive {ratio:.2f}x as fast, "
            "significantly; the comparator's service replayed at that rate and at its own, on the "
            "same jobs and traffic): "
            + "; ".join(
                f"{q} gap {load.gap[q]:+.0f} us ({level_text(1.0 - f_alpha)} CI "
                f"{load.ci[q][0]:+.0f}..{load.ci[q][1]:+.0f})"
                for q in QNAMES
            )
        )
    if not fired:
        # A gap past the threshold whose interval still includes zero is not "no regression":
        # the best estimate is a regression the requests at hand cannot confirm.
        # (at equal traffic and in the queue-free tail too, when read: the same rule on them)
        readings = [tg] if equal is None else [tg, TailGaps(equal.gap, equal.ci, {})]
        readings += [queue_free] if queue_free is not None else []
        unsure = [
            (q, g)
            for g in readings
            for q in QNAMES
            if gap_outcome(g.gap[q], g.ci[q][0], (qf_limit if g is queue_free else limit)[q])
            != NO_REGRESSION
            and not (g is queue_free and q in given_back)
        ]
        back_text = ""
        if given_back and equal is not None:
            q = given_back[0]
            back_text = (
                f"the {q} gap in the queue-free tail passes the practical threshold and its "
                f"interval excludes zero, but at equal traffic the queue gives it back ({q} gap "
                f"{equal.gap[q]:+.0f} us); "
            )
        if unsure:
            q, g = unsure[0]
            needed = requests_needed(g, q, n, policy.alpha if g is tg else f_alpha)
            return make(
                INCONCLUSIVE,
                f"too few requests to tell: the {q} gap{_reading(g, tg, queue_free)} is above the "
                f"practical threshold but its interval includes zero ({_more_requests(needed)}); "
                f"{back_text}{gap_text}",
                needed=needed,
            )
        if back_text:
            return make(INCONCLUSIVE, f"{back_text}{gap_text}")
        why = (
            "intervals include zero"
            if all(tg.ci[q][0] <= 0 for q in QNAMES)
            else "gaps below the practical threshold where their intervals exclude zero"
        )
        return make(NO_REGRESSION, f"{why}: {gap_text}")
    halves: dict[str, float] = {}
    if policy.check_comparator and lc.size >= 2 * policy.min_requests:
        # Where the queue-free tail fired, the comparator's own queue-free latencies, against
        # the thresholds that decision used.
        own = own_queue_free if at_queue_free and own_queue_free is not None else lc
        h = own.size // 2
        first, second = own[:h], own[h:]
        # Half the resamples: a check, not a figure anyone reads to the last digit.
        aa = tail_gaps(second, first, max(n_boot // 2, 50), seed + 17, policy.alpha)
        back = TailGaps(
            {q: -v for q, v in aa.gap.items()},
            {q: (-hi, -lo) for q, (lo, hi) in aa.ci.items()},
            {q: math.nan for q in aa.gap},
            aa.block,
        )
        a_lim, _ = thresholds(first, policy)
        b_lim, _ = thresholds(second, policy)
        if at_queue_free:
            a_lim = b_lim = qf_limit
        for q in QNAMES:
            halves[f"{q}_gap_us"] = aa.gap[q]
            halves[f"{q}_lo_us"], halves[f"{q}_hi_us"] = aa.ci[q]
        unstable = _fired(aa, a_lim) + _fired(back, b_lim)
        # The comparator differs from itself by more than the failing run differs from it.
        gap_of = equal.gap if at_equal and equal is not None else tg.gap
        if at_queue_free and queue_free is not None:
            gap_of = queue_free.gap
        worse = [q for q in unstable if abs(aa.gap[q]) >= gap_of[q]]
        if worse:
            q = worse[0]
            return make(
                INCONCLUSIVE,
                f"the comparator is not stable: its second half differs from its first by "
                f"{aa.gap[q]:+.0f} us at {q} (CI {aa.ci[q][0]:+.0f}..{aa.ci[q][1]:+.0f}), as "
                f"much as the failing run does ({gap_text})",
                halves,
            )
    how = (
        " at equal traffic (the observed gaps' intervals do not confirm it: the runs drew "
        "different traffic)"
        if at_equal
        else ""
    )
    if at_queue_free:
        observed = "observed and equal-traffic" if equal is not None else "observed"
        how = (
            f" in the queue-free tail (the {observed} intervals do not confirm it: at this load "
            "the queue's trajectory swings the latency tail from run to run; the rest of each "
            "request's latency, "
            + (
                "its service (its batch's formation set aside: the failing run got less "
                "traffic), is slower)"
                if lighter
                else "its service and its batch's formation, is slower)"
            )
        )
    if at_load:
        how = (
            f" with the load (the observed intervals do not confirm it: at this load the queue's "
            f"trajectory swings the latency tail from run to run; the failing run's requests "
            f"arrive {ratio:.2f}x as fast, and at that rate the comparator's own service queues "
            "longer)"
        )
    if at_exceed and exceeded is not None:
        on = (
            "on queue-free latencies (each request's latency minus its waits for a server "
            "busy with other requests): "
            if queues is not None
            else ""
        )
        how = (
            " by the tail-exceedance test (the quantile intervals include zero: too few "
            f"requests for them; {on}{exceeded.text()})"
        )
    return make(REGRESSION, f"{' and '.join(fired)} regressed{how}: {gap_text}", halves)
