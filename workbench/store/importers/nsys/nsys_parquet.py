"""`nsys export --type parquetdir` output: recognised only to say what to export instead."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError

# File stems the parquetdir exporter writes, one Parquet file per export table.
_NSYS_STEMS = frozenset({"StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                         "NVTX_EVENTS", "TARGET_INFO_GPU"})  # fmt: skip


def refuse_nsys_parquet(path: Path) -> None:
    """A one-line error for an nsys Parquet export (its layout is not confirmed here)."""
    if path.is_dir():
        stems = {p.name.split(".")[0] for p in path.iterdir()}
    else:
        stems = {path.name.split(".")[0]}
    if stems & _NSYS_STEMS:
        raise WorkbenchError(
            str(path),
            "looks like `nsys export --type parquetdir` output, which is not read: "
            "export SQLite instead (nsys export --type sqlite REPORT.nsys-rep)",
        )
