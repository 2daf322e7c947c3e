"""The import report: what was read, kept, skipped and attributed, and what looked wrong."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImportReport:
    """Returned by ingest(); the CLI prints lines(), the app shows the fields."""

    path: str
    run_ids: list[str]
    status: str  # "imported" | "unchanged"
    source_format: str = ""
    events_read: int = 0
    events_kept: int = 0
    read_by_phase: dict[str, int] = field(default_factory=dict)
    kept_by_phase: dict[str, int] = field(default_factory=dict)
    skipped_by_phase: dict[str, int] = field(default_factory=dict)
    # category -> (events in it, share of them with no stage)
    unattributed_by_category: dict[str, tuple[int, float]] = field(default_factory=dict)
    background_events: int = 0
    requests: int = 0
    request_unit: str = ""
    compilations: int = 0
    compiles_logged: int = 0
    device: str | None = None  # the hardware and the profile picked for it
    graph_launches: int = 0  # CUDA/HIP graph replays launched
    graph_kernels: int = 0  # kernels the trace links to those launches
    graph_unlinked: int = 0  # launches with no linked kernel: counted as replays only
    warnings: list[str] = field(default_factory=list)
    bytes_read: int = 0
    seconds: float = 0.0
    # LLM serving: how the records were joined to the trace's engine steps, e.g. "150 of 150
    # records joined by request_id"; "" for other runs.
    serving_join: str = ""

    @property
    def run_id(self) -> str:
        return self.run_ids[0] if self.run_ids else ""

    def lines(self) -> list[str]:
        """Human-readable summary, one fact per line."""
        runs = ", ".join(self.run_ids)
        if self.status == "unchanged":
            return [f"{self.path}: unchanged (run {runs} already holds this import)"]
        out = [
            f"{self.path}: imported as run {runs} ({self.source_format}, "
            f"{self.bytes_read / 1e6:.1f} MB in {self.seconds:.2f} s)",
            f"  events: read {self.events_read}, kept {self.events_kept}, "
            f"skipped {sum(self.skipped_by_phase.values())}",
            "  read by phase:    " + _counts(self.read_by_phase),
            "  kept by phase:    " + _counts(self.kept_by_phase),
        ]
        if self.skipped_by_phase:
            out.append(
                "  skipped by phase: "
                + _counts(self.skipped_by_phase)
                + " (M = names, s/t/f = flows: used, not stored)"
            )
        if self.device:
            out.append(f"  device: {self.device}")
        out.append(
            f"  requests: {self.requests} (unit: {self.request_unit}); "
            f"background events: {self.background_events}"
        )
        if self.serving_join:
            out.append(f"  llm serving: {self.serving_join}")
        if self.compilations or self.compiles_logged:
            out.append(
                f"  compilations in trace: {self.compilations}; "
                f"compile log rows: {self.compiles_logged}"
            )
        if self.graph_launches:
            out.append(
                f"  graph launches: {self.graph_launches}, {self.graph_kernels} kernels linked "
                f"to them; {self.graph_unlinked} replays without linked kernels"
            )
        if self.unattributed_by_category:
            parts = [
                f"{cat} {share:.0%} of {n}"
                for cat, (n, share) in sorted(self.unattributed_by_category.items())
                if share > 0
            ]
            if parts:
                out.append("  unattributed (no stage): " + ", ".join(parts))
        out.extend(f"  warning: {w}" for w in self.warnings)
        return out


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items())) or "-"
