"""Validation of a rollback / fix candidate: guardrail judge, production-like replay check, rollback
criteria, and the store-level `validate_incident` that records them.

Reference choice: the guardrails compare the candidate with the COMPARATOR (the known-good run:
a rollback must bring the service back to it, within tolerance); comparing with the failing run
would let any candidate that is merely less bad pass. The replay check compares the candidate's
shape mix with the FAILING run's, because the failing run is the production traffic the fix has
to hold on.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Final

import duckdb
import msgspec
import numpy as np
import pyarrow as pa

from accel import stats
from accel.stages import STAGES
from workbench.errors import WorkbenchError
from workbench.incident import lifecycle
from workbench.incident.guardrails import RunSamples, default_guardrails, rollback_criteria
from workbench.incident.incident import (
    Guardrail,
    Incident,
    ReplayCheck,
    RollbackCriterion,
    Validation,
    modify,
    now_iso,
)
from workbench.incident.judge import CONFIDENCE, judge
from workbench.incident.verdict import PASS_THRESHOLD, candidate_verdict
from workbench.store import db
from workbench.store.arrays import run_exists, verify

# PSI rule of thumb: < 0.1 stable, 0.1-0.25 moderate, > 0.25 a different population.
PSI_THRESHOLD: Final[float] = 0.25
# Share of candidate requests on shapes the failing run never saw, above which the candidate was
# measured on traffic production did not send.
UNSEEN_THRESHOLD: Final[float] = 0.05
UNKNOWN_SHAPE: Final[str] = "(unknown)"
SIZE_BUCKETS: Final[int] = 10


def _f64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def load_samples(con: duckdb.DuckDBPyConnection, run_id: str) -> RunSamples:
    """The judge's per-request samples of run_id; WorkbenchError when the run is not there."""
    if not run_exists(con, run_id):
        raise WorkbenchError(repr(run_id), "unknown run id (not in the store)")
    verify(con, run_id)
    t = db.query(con, "validation_requests", {"run_id": run_id})
    return RunSamples(
        run_id=run_id,
        latency_us=_f64(t, "latency_us"),
        stage_us={s: _f64(t, f"{s}_us") for s in STAGES},
        quality=_f64(t, "quality"),
        arrival_us=_f64(t, "arrival_us"),
        end_us=_f64(t, "end_us"),
        fallback_ops=np.asarray(t.column("fallback_ops").to_numpy(), dtype=np.int64),
        recompile_ops=np.asarray(t.column("recompile_ops").to_numpy(), dtype=np.int64),
        shape_key=t.column("shape_key").to_pylist(),
    )


def shape_size(key: str | None) -> float:
    """Elements of a request's (first) input tensor from its shape_key, e.g. "[2,512]" -> 1024.

    shape_key is "Input Dims"-style JSON: a dims list, or a list of dims lists (the first one is
    the request's input). NaN when the key is absent or not such a list.
    """
    if not key:
        return math.nan
    try:
        dims = json.loads(key)
    except ValueError:
        return math.nan
    if isinstance(dims, list) and dims and isinstance(dims[0], list):
        dims = dims[0]
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
        return math.nan
    return float(math.prod(dims))


def _sizes(keys: list[str | None]) -> np.ndarray:
    size_of = {k: shape_size(k) for k in set(keys)}
    return np.array([size_of[k] for k in keys], dtype=np.float64)


def _bucket_label(edges: np.ndarray, i: int) -> str:
    if edges.size == 0:
        return "all sizes"
    if i == 0:
        return f"< {edges[0]:,.0f} elements"
    if i == edges.size:
        return f">= {edges[-1]:,.0f} elements"
    return f"{edges[i - 1]:,.0f} to < {edges[i]:,.0f} elements"


def replay_check(reference: RunSamples, candidate: RunSamples) -> ReplayCheck:
    """Is the candidate measured on production-like shapes? PSI and unseen share vs reference.

    Shape keys that parse as dims are compared by size (elements of the input tensor) in buckets
    bounded by the reference's deciles (`quantile_bucket_counts`): exact keys such as "[2,128]"
    vs "[3,128]" split a few hundred requests into many sparse buckets, where PSI is noise. A
    size outside the reference's [min, max] counts as a shape production never sent. Keys that do
    not parse are compared as categories, an unseen key counting as unseen.
    """
    n_ref, n_cand = reference.n, candidate.n
    failed = ReplayCheck(
        reference=reference.run_id,
        candidate=candidate.run_id,
        psi=None,
        psi_threshold=PSI_THRESHOLD,
        unseen_share=None,
        unseen_threshold=UNSEEN_THRESHOLD,
        n_reference=n_ref,
        n_candidate=n_cand,
        n_shapes=0,
        passed=False,
        reason="",
    )
    if n_ref == 0 or n_cand == 0:
        empty = reference.run_id if n_ref == 0 else candidate.run_id
        return msgspec.structs.replace(failed, reason=f"no requests in {empty}")
    for run in (reference, candidate):
        if not any(run.shape_key):
            return msgspec.structs.replace(
                failed,
                reason=f"{run.run_id} records no request shapes (shape_key); "
                "shapes cannot be compared",
            )
    ref_sizes, cand_sizes = _sizes(reference.shape_key), _sizes(candidate.shape_key)
    if np.isfinite(ref_sizes).all() and np.isfinite(cand_sizes).all():
        ce, ca = stats.quantile_bucket_counts(ref_sizes, cand_sizes, SIZE_BUCKETS)
        # The same bounds quantile_bucket_counts uses, for the bucket labels.
        deciles = [i / SIZE_BUCKETS for i in range(1, SIZE_BUCKETS)]
        edges = np.unique(np.asarray(stats.quantile(ref_sizes, deciles)))
        labels = [_bucket_label(edges, i) for i in range(ce.size)]
        counts = list(zip(labels, ce.tolist(), ca.tolist(), strict=True))
        lo, hi = float(ref_sizes.min()), float(ref_sizes.max())
        unseen = float(((cand_sizes < lo) | (cand_sizes > hi)).mean())
        unseen_what = f"sizes outside the {lo:,.0f} to {hi:,.0f} elements {reference.run_id} sent"
    else:
        ref = Counter(k or UNKNOWN_SHAPE for k in reference.shape_key)
        cand = Counter(k or UNKNOWN_SHAPE for k in candidate.shape_key)
        keys = sorted(set(ref) | set(cand), key=lambda k: (-ref[k], -cand[k], k))
        counts = [(k, ref[k], cand[k]) for k in keys]
        unseen = sum(n for k, n in cand.items() if k not in ref) / n_cand
        unseen_what = f"shapes {reference.run_id} never saw"
    psi = stats.psi([c[1] for c in counts], [c[2] for c in counts])
    problems = []
    if not psi < PSI_THRESHOLD:
        problems.append(f"PSI {psi:.3f} >= {PSI_THRESHOLD} against {reference.run_id}")
    if unseen > UNSEEN_THRESHOLD:
        problems.append(
            f"{100 * unseen:.1f}% of its requests use {unseen_what} "
            f"(> {100 * UNSEEN_THRESHOLD:.0f}%)"
        )
    reason = (
        "; ".join(problems)
        if problems
        else f"PSI {psi:.3f} < {PSI_THRESHOLD}, {100 * unseen:.1f}% unseen shapes"
    )
    top = [
        {
            "shape_key": label,
            "n_reference": int(nr),
            "n_candidate": int(nc),
            "share_reference": nr / n_ref,
            "share_candidate": nc / n_cand,
        }
        for label, nr, nc in counts[:12]
    ]
    return msgspec.structs.replace(
        failed,
        psi=psi if math.isfinite(psi) else None,
        unseen_share=unseen,
        n_shapes=len(counts),
        passed=not problems,
        reason=reason,
        top_shapes=top,
    )


def compute_validation(
    store: Path,
    inc: Incident,
    candidate: str,
    actor: str,
    guardrails: list[Guardrail] | None = None,
) -> tuple[Validation, ReplayCheck, list[RollbackCriterion]]:
    """Judge `candidate` for `inc` without saving anything."""
    if not inc.failing or not inc.comparator:
        raise WorkbenchError(inc.id, "cannot validate: missing a failing and a comparator run")
    if candidate in (inc.failing, inc.comparator):
        raise WorkbenchError(
            repr(candidate), "the candidate must be a new run, not the failing or comparator run"
        )
    con = db.connect(store)
    try:
        cand = load_samples(con, candidate)
        base = load_samples(con, inc.comparator)
        failing = load_samples(con, inc.failing)
    finally:
        con.close()
    origin = inc.localization.origin if inc.localization else None
    rails = guardrails if guardrails is not None else default_guardrails(origin, base.has_quality())
    result = judge(rails, base, cand)
    validation = Validation(
        candidate=candidate,
        baseline=inc.comparator,
        baseline_role="comparator",
        guardrails=rails,
        cells=result.cells,
        score=0.0 if result.score is None else result.score,
        verdict=result.verdict,
        reasons=result.reasons,
        validated_at=now_iso(),
        validated_by=actor,
        confidence_level=CONFIDENCE,
        pass_threshold=PASS_THRESHOLD,
        # No Marginal band any more: under the pass threshold is FAIL (verdict.py).
        marginal_threshold=PASS_THRESHOLD,
    )
    check = replay_check(failing, cand)
    # The record keeps the one verdict (shapes included), so history and `incident list` agree.
    final = candidate_verdict(validation, check)
    validation = msgspec.structs.replace(validation, verdict=final.verdict, reasons=final.reasons)
    return validation, check, rollback_criteria(rails, base)


def validate_incident(
    store: Path,
    incident_id: str,
    candidate: str,
    actor: str,
    guardrails: list[Guardrail] | None = None,
    expected_version: int | None = None,
) -> Incident:
    """Validate `candidate`, record verdict, replay check and rollback criteria; enter validating.

    Refused (naming what is missing) before the incident has its owners.
    """

    def change(inc: Incident) -> Incident:
        if inc.status == "closed":
            raise WorkbenchError(inc.id, "is closed; reopen it first (`workbench incident reopen`)")
        missing = lifecycle.missing_for(inc, "assigned")
        if missing:
            raise WorkbenchError(inc.id, f"cannot validate yet: missing {'; '.join(missing)}")
        validation, check, criteria = compute_validation(store, inc, candidate, actor, guardrails)
        manual = [c for c in inc.rollback_criteria if c.source == "manual"]
        history = [*inc.validation_history, *([inc.validation] if inc.validation else [])]
        inc = msgspec.structs.replace(
            inc,
            candidate=candidate,
            validation=validation,
            validation_history=history,
            replay_check=check,
            rollback_criteria=[*criteria, *manual],
        )
        # The timeline keeps every verdict, refusals with their PSI and unseen share.
        verdict = candidate_verdict(validation, check).headline
        if inc.status == "validating":
            return lifecycle.note(inc, actor, "validated", verdict)
        return lifecycle.enter(inc, "validating", actor, verdict)

    return modify(store, incident_id, actor, change, expected_version)
