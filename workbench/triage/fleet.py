"""Fleet triage: where in a cohort of runs the latency tail lives (per host, per rank).

Each run's requests (latency, host, rank) are loaded by a per-run task mapped on the engine
(serial, local processes or Dask: the same numbers on each, since every statistic is computed
here, in run order, with fixed seeds). A host is flagged when the share of its requests above
the rest of its cohort's p95 is larger than the rest's own share above that p95: a two-sample
comparison of exceedance rates (Newcombe's interval, Bonferroni over the cohort's hosts) that
needs no distribution and states each host's n; a flagged host's share must also be at least
twice the rest's, so that a trivial shift on a huge n is not a finding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc
import pyarrow.parquet as pq

from accel import stats
from accel.localize.trigger import INCONCLUSIVE, gap_outcome
from workbench.errors import WorkbenchError
from workbench.store import layout
from workbench.store.arrays import WARMUP_NAME
from workbench.store.fleet.engine import Engine
from workbench.store.run_row import TAG_COLUMNS
from workbench.triage.evidence import Interval, quantile_ci

F64 = npt.NDArray[np.float64]
ALPHA = 0.05
MIN_HOST_REQUESTS = 20  # below this a host's tail is shown but never tested
PRACTICAL_RATIO = 2.0  # a flagged host exceeds the cohort's p95 at least this much more often
REGRESSION_SHARE = 0.05  # a pooled p99 gap below 5% of the comparator's p99 is no regression
_HOST_FIELDS = ("hardware", "driver_version", "runtime_version")


@dataclass(frozen=True)
class RunTask:
    """One run's load, as a worker sees it."""

    store: str
    run_id: str


@dataclass
class RunPart:
    """One run's non-warm-up requests: latency and where each was captured."""

    run_id: str
    latency_us: F64
    host: list[str]
    rank: list[str]
    host_tags: dict[str, dict[str, str]]


def load_run_part(task: RunTask) -> RunPart:
    """Read one run's requests from its exact partition path (runs on a worker)."""
    store = Path(task.store)
    row = layout.read_run_row(store, task.run_id)
    if row is None:
        raise WorkbenchError(task.run_id, f"no such run in {store}")
    path = layout.partition_dir(store, "requests", task.run_id) / layout.PART_FILE
    table = pq.read_table(path)
    names = table.column("name")
    warm = pc.fill_null(pc.match_substring_regex(names, WARMUP_NAME), False)
    table = table.filter(pc.invert(warm))
    n = table.num_rows
    fallback_host = str(row.get("host") or task.run_id)
    hosts = table.column("host").to_pylist() if "host" in table.column_names else [None] * n
    ranks = table.column("rank").to_pylist() if "rank" in table.column_names else [None] * n
    run_rank = row.get("rank")
    host = [h if h is not None else fallback_host for h in hosts]
    rank = [
        f"{h}/{r if r is not None else (run_rank if run_rank is not None else '-')}"
        for h, r in zip(host, ranks, strict=True)
    ]
    tags: dict[str, dict[str, str]] = {}
    members: list[dict[str, Any]] = list(row.get("members") or [])  # type: ignore[call-overload]
    for m in members:
        h = m.get("host") or fallback_host
        t = tags.setdefault(h, {})
        for key in _HOST_FIELDS:
            if m.get(key) is not None:
                t[key] = str(m[key])
        t.update(dict(m.get("tags") or []))
    if not members:
        tags[fallback_host] = {k: str(row[k]) for k in _HOST_FIELDS if row.get(k) is not None}
    lat = table.column("latency_us").to_numpy(zero_copy_only=False).astype(np.float64)
    return RunPart(task.run_id, lat, host, rank, tags)


@dataclass(frozen=True)
class GroupTail:
    """p95 / p99 of one host's (or rank's) requests with distribution-free intervals."""

    key: str
    n: int
    p95: Interval
    p99: Interval

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "n": self.n, "p95_us": self.p95.to_json(),
                "p99_us": self.p99.to_json()}  # fmt: skip


@dataclass(frozen=True)
class HostTest:
    """A host's share of requests above the rest's p95 against the rest's own share."""

    host: str
    n: int
    exceed: int
    rest_n: int
    rest_exceed: int
    diff: Interval  # host share - rest share, Newcombe interval at the Bonferroni level
    p99_gap_us: Interval  # host p99 - rest p99, bootstrap
    flagged: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "n": self.n, "exceed": self.exceed, "rest_n": self.rest_n,
            "rest_exceed": self.rest_exceed, "share_diff": self.diff.to_json(),
            "p99_gap_us": self.p99_gap_us.to_json(), "flagged": self.flagged,
        }  # fmt: skip


@dataclass(frozen=True)
class SharedTag:
    """A host tag every flagged host has, and how many other hosts have it too."""

    key: str
    value: str
    flagged: int
    others: int
    other_hosts: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CohortView:
    """One cohort of runs seen across its fleet."""

    runs: list[str]
    n: int
    p95: Interval
    p99: Interval
    hosts: list[GroupTail]
    ranks: list[GroupTail]
    tests: list[HostTest]
    shared_tags: list[SharedTag]
    level: float  # the per-host test level after Bonferroni

    @property
    def flagged(self) -> list[str]:
        return [t.host for t in self.tests if t.flagged]

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs, "n": self.n, "p95_us": self.p95.to_json(),
            "p99_us": self.p99.to_json(), "hosts": [h.to_json() for h in self.hosts],
            "ranks": [r.to_json() for r in self.ranks], "tests": [t.to_json() for t in self.tests],
            "flagged_hosts": self.flagged, "shared_tags": [s.to_json() for s in self.shared_tags],
            "test_level": self.level,
        }  # fmt: skip


@dataclass
class FleetView:
    """The failing cohort (and the comparator's) across the fleet, with the pooled verdict."""

    failing: CohortView
    comparator: CohortView | None = None
    p95_gap_us: Interval | None = None
    p99_gap_us: Interval | None = None
    verdict: str = "no comparator"
    engine: str = "serial"
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (`workbench fleet --json`); identical on every engine."""
        return {
            "verdict": self.verdict,
            "p95_gap_us": self.p95_gap_us.to_json() if self.p95_gap_us else None,
            "p99_gap_us": self.p99_gap_us.to_json() if self.p99_gap_us else None,
            "failing": self.failing.to_json(),
            "comparator": self.comparator.to_json() if self.comparator else None,
            "notes": self.notes,
        }


def _groups(keys: list[str], lat: F64) -> list[tuple[str, F64]]:
    if not keys:
        return []
    arr = np.asarray(keys, dtype=object)
    uniq, inv = np.unique(arr, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(uniq.size + 1))
    return [(str(uniq[j]), lat[order[bounds[j] : bounds[j + 1]]]) for j in range(uniq.size)]


def _tail(key: str, lat: F64) -> GroupTail:
    return GroupTail(key, int(lat.size), quantile_ci(lat, 0.95), quantile_ci(lat, 0.99))


def _host_tests(groups: list[tuple[str, F64]]) -> tuple[list[HostTest], float]:
    tested = [(h, x) for h, x in groups if x.size >= MIN_HOST_REQUESTS]
    if len(tested) < 2:
        return [], ALPHA
    level = ALPHA / len(tested)
    out = []
    for h, x in tested:
        rest = np.concatenate([y for g, y in groups if g != h])
        threshold = float(np.quantile(rest, 0.95))
        k, rk = int((x > threshold).sum()), int((rest > threshold).sum())
        d, lo, hi = stats.proportion_diff_ci(k, x.size, rk, rest.size, level)
        gap = stats.bootstrap_quantile_diff(x, rest, 0.99, seed=0, alpha=ALPHA)
        share, rest_share = k / x.size, rk / rest.size
        flagged = lo > 0 and share >= PRACTICAL_RATIO * rest_share
        out.append(
            HostTest(
                h, int(x.size), k, int(rest.size), rk, Interval(d, lo, hi), Interval(*gap), flagged
            )
        )
    # Most exceeding first: the hosts the on-call engineer looks at.
    out.sort(key=lambda t: (not t.flagged, -t.diff.value, t.host))
    return out, level


def _shared_tags(flagged: list[str], tags: dict[str, dict[str, str]]) -> list[SharedTag]:
    if not flagged:
        return []
    first = tags.get(flagged[0], {})
    others = [h for h in tags if h not in flagged]
    out = []
    for key, value in sorted(first.items()):
        if all(tags.get(h, {}).get(key) == value for h in flagged):
            n_other = sum(1 for h in others if tags[h].get(key) == value)
            out.append(SharedTag(key, value, len(flagged), n_other, len(others)))
    out.sort(key=lambda s: (s.others, s.key))  # tags only the flagged hosts have first
    return out


def cohort_view(parts: Sequence[RunPart]) -> CohortView:
    """Per-host and per-rank tails, host tests and shared tags of one cohort."""
    lat = np.concatenate([p.latency_us for p in parts]) if parts else np.zeros(0)
    hosts = [h for p in parts for h in p.host]
    ranks = [r for p in parts for r in p.rank]
    tags: dict[str, dict[str, str]] = {}
    for p in parts:
        for h, t in p.host_tags.items():
            tags.setdefault(h, {}).update(t)
    host_groups = _groups(hosts, lat)
    tests, level = _host_tests(host_groups)
    host_tails = [_tail(h, x) for h, x in host_groups]
    host_tails.sort(key=lambda t: (-np.nan_to_num(t.p99.value, nan=-math.inf), t.key))
    rank_tails = [_tail(r, x) for r, x in _groups(ranks, lat)]
    rank_tails.sort(key=lambda t: (-np.nan_to_num(t.p99.value, nan=-math.inf), t.key))
    flagged = [t.host for t in tests if t.flagged]
    return CohortView(
        runs=[p.run_id for p in parts],
        n=int(lat.size),
        p95=quantile_ci(lat, 0.95),
        p99=quantile_ci(lat, 0.99),
        hosts=host_tails,
        ranks=rank_tails,
        tests=tests,
        shared_tags=_shared_tags(flagged, tags),
        level=level,
    )


def _matches(row: dict[str, Any], want: dict[str, str]) -> bool:
    tags = dict(row.get("tags") or [])
    for key in TAG_COLUMNS:
        if row.get(key) is not None:
            tags.setdefault(key, str(row[key]))
    return all(tags.get(k) == v for k, v in want.items())


def select_runs(store: Path, run_ids: Sequence[str], tags: dict[str, str], role: str) -> list[str]:
    """A cohort: the named runs, else every run whose tags (or tag columns) match `tags`."""
    known = layout.run_ids(store)
    if run_ids:
        missing = [r for r in run_ids if r not in known]
        if missing:
            raise WorkbenchError(missing[0], f"no such run in {store} (--{role})")
        return list(dict.fromkeys(run_ids))
    if not tags:
        return []
    chosen = []
    for rid in known:
        row = layout.read_run_row(store, rid)
        if row is not None and _matches(row, tags):
            chosen.append(rid)
    if not chosen:
        wanted = ", ".join(f"{k}={v}" for k, v in tags.items())
        raise WorkbenchError(f"--{role}-tag {wanted}", f"matches no run in {store}")
    return chosen


def fleet_view(
    store: Path,
    failing: Sequence[str],
    comparator: Sequence[str] = (),
    *,
    engine: Engine | None = None,
) -> FleetView:
    """Fleet triage of the failing cohort (run ids), against the comparator cohort if given.

    The function the app's Runs and Evidence screens call for the fleet view.
    """
    if not failing:
        raise WorkbenchError("fleet", "name the failing runs (--failing or --failing-tag)")
    overlap = set(failing) & set(comparator)
    if overlap:
        raise WorkbenchError(sorted(overlap)[0], "is in both the failing and comparator cohorts")
    eng = engine or Engine("serial", 1)
    tasks = [RunTask(str(store), r) for r in [*failing, *comparator]]
    parts = list(eng.map(load_run_part, tasks))
    fail = cohort_view(parts[: len(failing)])
    view = FleetView(fail, engine=eng.kind)
    if not comparator:
        return view
    comp_parts = parts[len(failing) :]
    view.comparator = cohort_view(comp_parts)
    a = np.concatenate([p.latency_us for p in parts[: len(failing)]])
    b = np.concatenate([p.latency_us for p in comp_parts])
    view.p95_gap_us = Interval(*stats.bootstrap_quantile_diff(a, b, 0.95, seed=0, alpha=ALPHA))
    view.p99_gap_us = Interval(*stats.bootstrap_quantile_diff(a, b, 0.99, seed=0, alpha=ALPHA))
    view.verdict = _verdict(view.p99_gap_us, view.comparator.p99.value, a.size, b.size)
    return view


def _verdict(gap: Interval, comparator_p99: float, n_fail: int, n_comp: int) -> str:
    """The pair trigger's rule (trigger.gap_outcome) on the pooled p99 gap, with 5% of the
    comparator's p99 as the practical threshold; inconclusive below 100 requests a cohort."""
    if min(n_fail, n_comp) < 100 or not math.isfinite(gap.lo):
        return INCONCLUSIVE
    return gap_outcome(gap.value, gap.lo, REGRESSION_SHARE * comparator_p99)


def text_lines(view: FleetView, top: int = 8) -> list[str]:
    """The fleet view for a terminal: tails first, hosts most affected first, with n and CIs."""

    def iv(x: Interval) -> str:
        return f"{x.value / 1e3:.2f} ms [{x.lo / 1e3:.2f}, {x.hi / 1e3:.2f}]"

    out: list[str] = []
    cohorts = [("failing", view.failing)]
    if view.comparator is not None:
        cohorts.append(("comparator", view.comparator))
    if view.p99_gap_us is not None and view.p95_gap_us is not None:
        out.append(
            f"pooled verdict: {view.verdict}  p99 gap {iv(view.p99_gap_us)}  "
            f"p95 gap {iv(view.p95_gap_us)}"
        )
    for name, c in cohorts:
        out.append(
            f"{name} cohort: {len(c.runs)} run(s), n={c.n} requests, p99 {iv(c.p99)}, "
            f"p95 {iv(c.p95)}"
        )
        if c.tests:
            flagged = ", ".join(c.flagged) or "none"
            out.append(
                f"  hosts whose tail differs from the rest (share above the rest's p95, "
                f"level {c.level:.4f}): {flagged}"
            )
        for t in c.tests[:top]:
            mark = "*" if t.flagged else " "
            out.append(
                f"  {mark} {t.host:<16} n={t.n:<6} above p95: {t.exceed}/{t.n} vs rest "
                f"{t.rest_exceed}/{t.rest_n}  share diff {t.diff.value:+.3f} "
                f"[{t.diff.lo:+.3f}, {t.diff.hi:+.3f}]  p99 gap {iv(t.p99_gap_us)}"
            )
        for s in c.shared_tags:
            out.append(
                f"  shared by the flagged hosts: {s.key}={s.value} "
                f"({s.others} of {s.other_hosts} other hosts have it)"
            )
        out.append("  p99 by host (n, p99 [95% CI]):")
        for h in c.hosts[:top]:
            out.append(f"    {h.key:<16} n={h.n:<6} p99 {iv(h.p99)}  p95 {iv(h.p95)}")
        out.append("  p99 by rank:")
        for r in c.ranks[:top]:
            out.append(f"    {r.key:<16} n={r.n:<6} p99 {iv(r.p99)}")
    return out
