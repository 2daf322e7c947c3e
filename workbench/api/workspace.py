"""A store opened for scripts and notebooks: its runs, pair comparisons and imports."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.api.comparison import Comparison
from workbench.errors import WorkbenchError
from workbench.incident.numbers import finite
from workbench.store import db, objstore

if TYPE_CHECKING:
    import polars as pl

    from accel.localize import TriggerPolicy
    from workbench.store.baselines import Baseline
    from workbench.store.progress import ProgressFn
    from workbench.store.report import ImportReport

# The largest practical threshold a caller may set, as a share of the comparator's quantile:
# a gap that large is never a regression (tests set 50 to say so); beyond it, a typo.
MAX_SHARE = 1000.0


class Workspace:
    """One store. Reading (runs, compare, a comparison's views) never writes it; `ingest` and
    a comparison's `attach` are the calls that do."""

    def __init__(self, store: Path) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"Workspace({str(self._store)!r})"

    @property
    def store(self) -> Path:
        """The store directory (a bucket store's local mirror)."""
        return self._store

    @property
    def runs(self) -> pl.DataFrame:
        """The committed runs as `workbench runs` lists them (oldest import first), read now."""
        from workbench.api.frames import runs_frame
        from workbench.store.runs import list_runs

        return runs_frame(list_runs(self._store))

    def compare(
        self,
        failing: str,
        comparator: str | None = None,
        *,
        slo_us: float | None = None,
        min_gap: float | None = None,
        slo_share: float | None = None,
        hardware: str | None = None,
        suspect: str | None = None,
        fixed: str | None = None,
        progress: Callable[[str, float], None] | None = None,
        release_heap: bool = True,
        against: str | Baseline | None = None,
        slo: str | None = None,
    ) -> Comparison:
        """Triage `failing` against `comparator` (None: the best-ranked candidate), or against
        a named baseline (`against`: "baseline:NAME", or one resolved already), as `workbench triage` does.
        `min_gap`/`slo_share` are its --min-gap/--slo-share; `slo_us` the latency SLO in us
        (default: the requests' sla_us); `slo` the serving SLO of LLM runs (ttft, itl, tpot,
        e2e; default the one that regressed most). Writes nothing."""
        from workbench.triage.triage import triage

        reasons: list[str] = []
        if against is not None:
            from workbench.store.baselines import Baseline, resolve

            if comparator is not None:
                raise WorkbenchError("against", "name a comparator or a baseline, not both")
            # A baseline the caller resolved already is used as it is: read again, a re-tag in
            # between could pair another run than the one the caller reports.
            baseline = against if isinstance(against, Baseline) else resolve(self._store, against)
            comparator, reasons = baseline.run_id, [baseline.describe()]
        result = triage(
            self._store,
            failing,
            comparator,
            hardware=hardware,
            suspect=suspect,
            fixed=fixed,
            progress=progress,
            release_heap=release_heap,
            policy=trigger_policy(min_gap=min_gap, slo_share=slo_share, slo_us=slo_us),
            slo=slo,
        )
        if reasons:  # the comparator is the baseline's run: say so where the pairing is told
            result = replace(result, comparator_reasons=reasons)
        return Comparison(self._store, result)

    def ingest(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        run_id: str | None = None,
        label: str | None = None,
        tags: Mapping[str, str] | None = None,
        compile_log: str | Path | None = None,
        request_pattern: str | None = None,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> list[ImportReport]:
        """Import trace files (or Parquet / another store) as `workbench ingest` does: each
        file one run, all-or-nothing per run; the reports in the order of `paths`."""
        from workbench.store.ingest import ingest, parse_tags

        files = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
        if not files:
            raise WorkbenchError("paths", "name at least one file to import")
        if run_id is not None and len(files) > 1:
            raise WorkbenchError("run_id", "can name only one file's run; give one file")
        tag_items = [f"{k}={v}" for k, v in _tag_pairs(tags)]
        reports: list[ImportReport] = []
        for path in files:
            report = ingest(
                self._store,
                path,
                run_id=run_id,
                label=label,
                tags=parse_tags(tag_items, "tags"),
                compile_log=Path(compile_log) if compile_log is not None else None,
                request_pattern=request_pattern,
                progress=progress,
                cancel=cancel,
            )
            if report.status == "imported":
                for rid in report.run_ids:
                    objstore.publish_run_or_undo(self._store, rid, str(path))
            reports.append(report)
        return reports


def open_store(store: str | Path) -> Workspace:
    """Open a store directory (or an `s3://BUCKET/PREFIX` store through its local mirror);
    a missing or unreadable store is a WorkbenchError naming it."""
    if not isinstance(store, str | Path):
        raise WorkbenchError(repr(store), "a store is a directory path or an s3:// URL")
    if objstore.is_remote(store):
        path = objstore.open_store(str(store))
    else:
        path = Path(store).expanduser()
    db.connect(path).close()  # the CLI's checks: a directory whose runs can be read
    return Workspace(path)


def trigger_policy(
    *, min_gap: float | None, slo_share: float | None, slo_us: float | None
) -> TriggerPolicy:
    """TriggerPolicy with the caller's thresholds, each checked finite and in range."""
    from accel.localize import TriggerPolicy

    policy = TriggerPolicy()
    if min_gap is not None:
        policy = replace(policy, min_rel_gap=finite(min_gap, "min_gap", 0.0, MAX_SHARE))
    if slo_share is not None:
        policy = replace(policy, slo_share=finite(slo_share, "slo_share", 0.0, MAX_SHARE))
    if slo_us is not None:
        slo = finite(slo_us, "slo_us", 0.0)
        if slo == 0.0:
            raise WorkbenchError("slo_us", "must be above 0 (got 0)")
        policy = replace(policy, sla_us=slo)
    return policy


def _tag_pairs(tags: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The tags as (key, value) text; a key holding '=' could not be told from its value."""
    out: list[tuple[str, str]] = []
    for k, v in (tags or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise WorkbenchError(f"tag {k!r}", "keys and values are strings")
        if "=" in k:
            raise WorkbenchError(f"tag {k!r}", "a tag key cannot hold '='")
        out.append((k, v))
    return out
