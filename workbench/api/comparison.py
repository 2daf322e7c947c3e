"""A computed triage of one pair, as typed records and polars frames; its two writing calls
(`to_perfetto`, `attach`) write only when called."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.api.records import RequestPair, Verdict
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    import polars as pl

    from workbench.incident.incident import Incident
    from workbench.triage.triage import TriageResult


class Comparison:
    """The triage of `failing` against `comparator` (workbench.triage.triage.triage's result,
    the one the CLI and the app print). Its views only read; `attach` (the incident record)
    and `to_perfetto` (a file outside the store) are its only writes."""

    def __init__(self, store: Path, result: TriageResult) -> None:
        self._store = store
        self._result = result

    @cached_property
    def _doc(self) -> dict[str, Any]:
        """to_json() once, for the views built from it (callers get their own copy)."""
        return self._result.to_json()

    def __repr__(self) -> str:
        v = self.verdict
        where = (
            f", origin {v.origin_stage} -> manifest {v.manifest_stage}, {v.mechanism}"
            if v.triggered
            else ""
        )
        return f"<Comparison {v.failing} vs {v.comparator}: {v.outcome}{where}>"

    @property
    def result(self) -> TriageResult:
        """The triage result the views are read from (the CLI's and the gate's input; its
        fields are not part of the stable API)."""
        return self._result

    @property
    def failing(self) -> str:
        return self._result.failing

    @property
    def comparator(self) -> str:
        """The comparator run: the one given, or the best-ranked candidate (see verdict)."""
        return self._result.comparator

    @cached_property
    def verdict(self) -> Verdict:
        """Outcome and reason, origin / manifest stage, mechanism, confidence, tail gaps, n."""
        return Verdict.of(self._doc)

    @cached_property
    def stages(self) -> pl.DataFrame:
        """Steady state per stage and quantile (p99 first): both runs with 95% intervals, gap."""
        from workbench.api.frames import stages_frame

        return stages_frame(self._doc)

    @cached_property
    def tail_drivers(self) -> pl.DataFrame:
        """Queueing, core imbalance, fallback, recompiles as shares of the p99 gap, with n."""
        return self.evidence("tail_drivers")

    @cached_property
    def proof(self) -> pl.DataFrame:
        """Each claim with the query (or replay step) that proves it and its numbers."""
        from workbench.api.frames import proof_frame

        return proof_frame(self._doc)

    @property
    def evidence_queries(self) -> tuple[str, ...]:
        """The evidence queries this triage ran: the names `evidence()` takes."""
        return tuple(self._result.evidence)

    def evidence(self, query: str) -> pl.DataFrame:
        """The rows of one evidence query (a proving artifact named in `proof`)."""
        from workbench.api.frames import table_frame

        table = self._result.evidence.get(query)
        if table is None:
            raise WorkbenchError(
                repr(query),
                "not an evidence query of this triage (it ran "
                + ", ".join(self._result.evidence)
                + ")",
            )
        return table_frame(table.table)

    def request(self, request_id: str | None = None, *, q: float = 0.99) -> RequestPair:
        """A failing request's stage times beside the comparator's request of the same shape at
        the same latency quantile; without an id, the failing run's request at quantile q."""
        from workbench.api.requests import request_pair

        return request_pair(self._store, self.failing, self.comparator, request_id, q)

    def to_json(self) -> dict[str, Any]:
        """The document `workbench triage --json` prints (a fresh copy on every call)."""
        return self._result.to_json()

    def text(self) -> str:
        """The report `workbench triage` prints (plain text, times in ms)."""
        from workbench.triage.report_text import render

        return render(self._result)

    def to_perfetto(self, path: str | Path, *, replace: bool = False) -> Path:
        """Write the pair as a Perfetto trace at `path` (a new file unless `replace`)."""
        from workbench.incident.perfetto_export import write_perfetto

        return Path(write_perfetto(self._store, self._result, Path(path), replace=replace))

    def attach(self, incident_id: str, actor: str) -> Incident:
        """Record this triage on the incident (as `workbench triage --incident` does)."""
        from workbench.incident.workflow import attach_triage

        if not isinstance(actor, str) or not actor.strip():
            raise WorkbenchError("actor", "name who attaches the triage (a non-empty string)")
        return attach_triage(self._store, incident_id, self.to_json(), actor)
