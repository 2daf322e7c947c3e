"""Comparator pairing: rank candidate runs for a failing run and say why; warn on locked tags."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import duckdb

from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.store.arrays import run_exists, run_presence

# Tags a fair comparison must hold equal: a difference here can explain a regression by itself.
LOCKED_TAGS: Final[tuple[str, ...]] = (
    "hardware",
    "device_count",
    "driver_version",
    "runtime",
    "runtime_version",
    "compiler",
    "compiler_version",
    "thermal_state",
)
# Software under change, by family: a candidate that differs from the failing run in one family
# only isolates that change, so without --suspect it is the family taken as the suspect.
SUSPECT_FAMILIES: Final[tuple[frozenset[str], ...]] = (
    frozenset({"compiler", "compiler_version"}),
    frozenset({"runtime", "runtime_version"}),
)
MIN_REQUESTS: Final[int] = 50  # below this a p99 rests on fewer than one request in the tail
CLOSE_SECONDS: Final[float] = 7 * 86400.0  # runs a week apart see different fleet conditions


@dataclass(frozen=True)
class TagMismatch:
    key: str
    failing_value: str | None
    other_value: str | None

    def warning(self, other_role: str) -> str:
        return (
            f"locked tag {self.key} differs: failing {self.failing_value or 'unknown'}, "
            f"{other_role} {self.other_value or 'unknown'}"
        )


@dataclass(frozen=True)
class Candidate:
    """One comparator candidate, its place in the ranking and the reasons for it."""

    run_id: str
    rank: int
    eligible: bool
    n_requests: int
    seconds_apart: float | None
    mismatches: list[TagMismatch] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def locked_mismatches(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    others: list[str],
    *,
    suspect: str | None = None,
) -> dict[str, list[TagMismatch]]:
    """Per other run, its locked tags that differ from the failing run's (suspect excluded)."""
    locked = [t for t in LOCKED_TAGS if t != suspect]
    rows = db.query(con, "tag_diff", {"failing": failing, "others": others, "locked": locked})
    out: dict[str, list[TagMismatch]] = {r: [] for r in others}
    for row in rows.to_pylist():
        if row["locked"] and row["differs"]:
            out[row["run_id"]].append(
                TagMismatch(row["key"], row["failing_value"], row["other_value"])
            )
    return out


def _require(con: duckdb.DuckDBPyConnection, run_id: str, role: str) -> None:
    if not run_exists(con, run_id):
        raise WorkbenchError(repr(run_id), f"{role} run is not in the store")


def rank_comparators(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    *,
    suspect: str | None = None,
    fixed: str | None = None,
    min_requests: int = MIN_REQUESTS,
) -> list[Candidate]:
    """Candidates best first, each with the reasons for its place.

    Eligible: same model and workload, locked tags equal except the suspect, enough requests.
    Without a suspect, a run whose locked differences all lie in one software family (compiler
    or runtime) isolates that change and stays eligible. Then: a run that isolates the suspect
    before one that repeats the failing configuration (a reproduction, not a comparison); a run
    from before the failing one (a baseline precedes the change) before one from after (a fix
    candidate); fewer differing free-form tags; closer in time; more requests. With `fixed`
    (the pinned fixed-metadata run), tags are checked against that run.
    """
    _require(con, failing, "failing")
    if fixed is not None:
        _require(con, fixed, "fixed-metadata")
    rows = db.query(con, "run_candidates", {"failing": failing}).to_pylist()
    reference = fixed or failing
    others = [r["run_id"] for r in rows if r["run_id"] != reference]
    locked = [t for t in LOCKED_TAGS if t != suspect]
    diffs: dict[str, list[dict[str, Any]]] = {o: [] for o in others}
    if others:
        params = {"failing": reference, "others": others, "locked": locked}
        for d in db.query(con, "tag_diff", params).to_pylist():
            diffs[d["run_id"]].append(d)
    scored: list[tuple[tuple[int, int, int, int, int, float, int], Candidate]] = []
    for row in rows:
        rid = row["run_id"]
        tags = diffs.get(rid, [])
        mismatches = [
            TagMismatch(d["key"], d["failing_value"], d["other_value"])
            for d in tags
            if d["locked"] and d["differs"]
        ]
        inferred = _isolated_family(mismatches) if suspect is None else None
        bad = [] if inferred else mismatches
        soft = [d for d in tags if d["differs"] and d["key"].startswith("tag:")]
        sus = next((d for d in tags if suspect and d["key"] == suspect), None)
        reasons: list[str] = []
        eligible = True
        if not row["same_model"]:
            eligible = False
            reasons.append(f"different model ({row['model']})")
        if not row["same_workload"]:
            eligible = False
            reasons.append(f"different workload ({row['workload']})")
        if bad:
            eligible = False
            reasons.append(
                "locked tags differ: "
                + ", ".join(
                    f"{m.key} {_known(m.failing_value)} -> {_known(m.other_value)}" for m in bad
                )
            )
        n = int(row["n_requests"])
        if n < min_requests:
            eligible = False
            reasons.append(f"only {n} requests (< {min_requests})")
        if suspect is None:
            repeats_suspect = not inferred and not any(
                d["differs"] and d["key"] in _SUSPECTABLE for d in tags
            )
        else:
            repeats_suspect = sus is None or not sus["differs"]
        apart = row["seconds_apart"]
        apart_f = float(apart) if apart is not None else None
        after = row["seconds_after"] is not None and float(row["seconds_after"]) > 0
        # The failing configuration run again after the failure (the pinned fixed-metadata run
        # is one) shows the regression too: paired with it, triage finds no gap to explain.
        # From before the failure, the same configuration is still a known-good baseline.
        reproduction = repeats_suspect and (after or rid == fixed)
        if reproduction:
            eligible = False
        repeat = _repeat_role(reproduction, rid == fixed)
        if inferred:
            reasons.append(
                "differs only in "
                + ", ".join(
                    f"{m.key} {_known(m.failing_value)} -> {_known(m.other_value)}"
                    for m in inferred
                )
                + ": isolates that change, taken as the suspect"
            )
        elif suspect is None and repeats_suspect:
            reasons.append(f"same configuration as the failing run{repeat}")
        if suspect and sus is not None and sus["differs"]:
            reasons.append(
                f"{suspect} {_known(sus['other_value'])} vs {_known(sus['failing_value'])}: "
                "isolates the suspect"
            )
        elif suspect and repeats_suspect:
            reasons.append(f"same {suspect} as the failing run{repeat}")
        if soft:
            reasons.append(
                "tags differ: "
                + ", ".join(
                    f"{d['key'][4:]} {_known(d['failing_value'])} -> {_known(d['other_value'])}"
                    for d in soft
                )
            )
        if apart_f is not None and apart_f > CLOSE_SECONDS:
            reasons.append(f"{apart_f / 86400:.0f} days apart")
        if eligible:
            reasons.insert(
                0, f"same model and workload, {'other ' if inferred else ''}locked tags equal"
            )
            when = "after" if after else "before"
            reasons.append(f"{n} requests, {format_apart(apart_f)} {when} the failing run")
        key = (
            0 if eligible else 1,
            1 if repeats_suspect else 0,
            1 if after else 0,
            len(bad) + (0 if row["same_model"] else 10) + (0 if row["same_workload"] else 10),
            len(soft),
            apart_f if apart_f is not None else float("inf"),
            -n,
        )
        scored.append((key, Candidate(rid, 0, eligible, n, apart_f, mismatches, reasons)))
    scored.sort(key=lambda kc: (kc[0], kc[1].run_id))
    return [
        Candidate(
            c.run_id, i + 1, c.eligible, c.n_requests, c.seconds_apart, c.mismatches, c.reasons
        )
        for i, (_, c) in enumerate(scored)
    ]


_SUSPECTABLE: Final[frozenset[str]] = frozenset().union(*SUSPECT_FAMILIES)


def _repeat_role(reproduction: bool, pinned: bool) -> str:
    """What a run that repeats the failing configuration is to the pairing."""
    if pinned:
        return ": the pinned fixed-metadata run, a reproduction, not a comparator"
    if reproduction:
        return ", run after it: a reproduction of the failure, not a comparator"
    return ", from before it: a baseline that isolates no change"


def _isolated_family(mismatches: list[TagMismatch]) -> list[TagMismatch]:
    """The mismatches when they all lie in one software family, else an empty list."""
    keys = {m.key for m in mismatches}
    if keys and any(keys <= family for family in SUSPECT_FAMILIES):
        return mismatches
    return []


def _known(value: object) -> str:
    """A tag value for a sentence: an unknown (null) tag reads "unknown", never "None"."""
    return "unknown" if value is None else str(value)


def format_apart(seconds: float | None, *, compact: bool = False) -> str:
    """Time between two runs in words ("35 min", "1.0 h", "30 days"); compact for tables."""
    if seconds is None:
        return "?" if compact else "unknown time"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} {'d' if compact else 'days'}"


def pick_comparator(
    con: duckdb.DuckDBPyConnection, failing: str, *, suspect: str | None = None
) -> Candidate:
    """The best candidate; WorkbenchError when the store holds no other run."""
    ranked = rank_comparators(con, failing, suspect=suspect)
    if not ranked:
        raise WorkbenchError(repr(failing), "no other run in the store to compare against")
    return ranked[0]


def pair_warnings(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str,
    *,
    suspect: str | None = None,
    fixed: str | None = None,
    min_requests: int = MIN_REQUESTS,
) -> list[str]:
    """Warnings about a pairing, locked-tag mismatches first."""
    _require(con, failing, "failing")
    _require(con, comparator, "comparator")
    warnings = [
        m.warning("comparator")
        for m in locked_mismatches(con, failing, [comparator], suspect=suspect)[comparator]
    ]
    if fixed is not None and fixed not in (failing, comparator):
        _require(con, fixed, "fixed-metadata")
        for rid, found in locked_mismatches(con, fixed, [failing, comparator]).items():
            warnings.extend(
                f"locked tag {m.key} of {rid} differs from fixed-metadata run {fixed}: "
                f"{m.failing_value or 'unknown'} vs {m.other_value or 'unknown'}"
                for m in found
            )
    row = next(
        r
        for r in db.query(con, "run_candidates", {"failing": failing}).to_pylist()
        if r["run_id"] == comparator
    )
    for key, same in (("model", row["same_model"]), ("workload", row["same_workload"])):
        if not same:
            warnings.append(f"comparator {comparator} is a different {key} ({row[key]})")
    for role, rid in (("failing", failing), ("comparator", comparator)):
        n = run_presence(con, rid)[1]
        if n < min_requests:
            warnings.append(f"{role} run {rid} has only {n} requests (< {min_requests}): wide CIs")
    return warnings
