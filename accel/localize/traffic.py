"""Is a tail gap the traffic? Two draws of the same arrival process queue differently, and at
a few hundred requests a busy period more or less moves p95 by tens of percent. The failing
run's service is fed the comparator's arrivals through the queue re-run: if the gap goes below
the trigger's rule (interval clear of zero and above the practical threshold) while the arrival
rates do not differ, it was the traffic."""

from __future__ import annotations

import numpy as np

from accel.localize.gaps import QNAMES, at_q
from accel.localize.requeue import (
    burstier,
    observed_queue,
    reproduction,
    requeue,
    same_arrival_rate,
    with_arrivals,
)
from accel.localize.trigger import Trigger, tail_gaps
from accel.ops import RunArrays
from accel.stats import mann_whitney_u, proportion_diff_ci


def traffic_noise(failing: RunArrays, comparator: RunArrays, trig: Trigger, alpha: float) -> str:
    """Why the tail gap is the traffic, not the service ('' when it is not): neither the
    arrival rates nor the requests' service differ significantly, and the failing run's service fed the comparator's arrivals
    (queue re-run, which must reproduce both runs) no longer passes the trigger's rule at any
    quantile that fired. Two draws of the same traffic queue differently; that is no change."""
    fr, cr = failing.requests, comparator.requests
    if fr.size < 3 or cr.size < 3:
        return ""
    if not same_arrival_rate(fr.arrival_us, cr.arrival_us, alpha):
        return ""  # the load changed: a queueing regression, if anything
    if burstier(fr.arrival_us, cr.arrival_us, alpha):
        return ""  # the arrival process changed (burstier at the same rate): ingress's doing
    fq, cq = observed_queue(fr), observed_queue(cr)
    # The service itself changed (a shift, or more requests past the comparator's p95 of it):
    # then the gap is not the traffic, whatever a re-run says.
    cut = at_q(cq.service, 0.95)
    excess_lo = proportion_diff_ci(
        int((fq.service > cut).sum()), fr.size, int((cq.service > cut).sum()), cr.size, alpha
    )[1]
    u_p = mann_whitney_u(fq.service, cq.service)[1]
    if excess_lo > 0 or (u_p < alpha and at_q(fq.service, 0.5) > at_q(cq.service, 0.5)):
        return ""
    if not (reproduction(fq, fr).reproduced and reproduction(cq, cr).reproduced):
        return ""
    stage = np.asarray(fr.stage_us, dtype=np.float64)
    fed = with_arrivals(fq, np.asarray(cr.arrival_us, dtype=np.float64))
    lat = requeue(fed, stage)[np.argsort(fed.arrival, kind="stable")]
    lc = np.asarray(cr.latency_us, dtype=np.float64)[
        np.argsort(np.asarray(cr.arrival_us, dtype=np.float64), kind="stable")
    ]
    # The trigger's own rule on the swapped pair: does a regression remain?
    tg = tail_gaps(lat, lc, 200, 7)
    swapped = tg.gap
    if any(tg.ci[q][0] > 0 and tg.gap[q] > trig.threshold_us[q] for q in trig.fired):
        return ""
    return (
        "the gap is the traffic: arrival rates do not differ, and the failing run's service fed "
        "the comparator's arrivals gives "
        + ", ".join(
            f"{q} {swapped[q]:+.0f} us (threshold {trig.threshold_us[q]:.0f})" for q in QNAMES
        )
        + f" against the observed {', '.join(f'{q} {trig.gaps.gap[q]:+.0f} us' for q in QNAMES)}"
    )
