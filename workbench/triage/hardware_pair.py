"""Whether a pair has the requests a tail comparison needs, and, when it does not, a one-line
refusal that leads with the hardware difference if the two runs ran on different accelerators
(the cross-hardware captures people have are often single steps)."""

from __future__ import annotations

import duckdb

from workbench.errors import WorkbenchError
from workbench.store.arrays import run_presence
from workbench.store.importers.devices import profile_line
from workbench.triage.context import RunContext


def same_hardware(a: str | None, b: str | None) -> bool:
    return (a or "").strip().lower() == (b or "").strip().lower()


def _requests(n: int) -> str:
    return f"{n} request" if n == 1 else f"{n} requests"


def check_enough_requests(
    con: duckdb.DuckDBPyConnection, f_run: RunContext, c_run: RunContext, need: int
) -> None:
    """A one-line WorkbenchError when either run has fewer than `need` requests."""
    failing, comparator = f_run.run_id, c_run.run_id
    counts = {rid: run_presence(con, rid)[1] for rid in (failing, comparator)}
    short = [(role, rid) for role, rid in (("failing", failing), ("comparator", comparator))
             if counts[rid] < need]  # fmt: skip
    if not short:
        return
    f_hw, c_hw = f_run.hardware, c_run.hardware
    if same_hardware(f_hw, c_hw):
        role, rid = short[0]
        raise WorkbenchError(repr(rid), f"{role} run has fewer than {need} requests to compare")
    raise WorkbenchError(
        f"{failing!r} vs {comparator!r}",
        f"inconclusive: different hardware ({profile_line(f_hw) or 'unknown'} vs "
        f"{profile_line(c_hw) or 'unknown'}) and {_requests(counts[failing])} vs "
        f"{_requests(counts[comparator])}, while a tail needs {need} per run: neither the gap "
        "nor the share of it the hardware profiles predict can be measured",
    )
