"""Graph-break evidence for triage: per-request region counts on the run arrays (what the
mechanism rule reads) and the proof of a graph_break verdict (ops at the break, log reasons)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import numpy as np

from accel.ops import RunArrays
from workbench.store import db
from workbench.triage.evidence import EvidenceTable


def with_regions(con: duckdb.DuckDBPyConnection, run: RunArrays) -> RunArrays:
    """The run with `regions` and `eager_between` per request, in its request order."""
    t = db.query(con, "graph_break_requests", {"run_id": run.run_id})
    ids = t.column("request_id").to_pylist()
    pos = {rid: i for i, rid in enumerate(ids)}
    regions = np.asarray(t.column("regions").to_numpy(), dtype=np.int64)
    eager = np.asarray(t.column("eager_ops").to_numpy(), dtype=np.int64)
    take = np.array([pos.get(r, -1) for r in run.requests.request_id], dtype=np.int64)
    if take.size == 0 or (take < 0).any():
        return run  # the loader's requests and the table disagree: leave the evidence unknown
    return replace(run, regions=regions[take], eager_between=eager[take])


@dataclass(frozen=True)
class BreakProof:
    """The claim text of a graph break and its numbers."""

    text: str
    numbers: dict[str, Any]
    action: str


def proof(
    table: EvidenceTable, failing: RunArrays, comparator: RunArrays, scores: dict[str, float]
) -> BreakProof:
    """What broke the graph, from the trace (eager ops between graphs) and, when imported, the
    compile log (reason, user file:line and code, torch's hint)."""
    rows = table.rows()
    ops = [r for r in rows if r["source"] == "trace"]
    logged = [json.loads(r["what"]) | {"n": r["n"]} for r in rows if r["source"] == "compile_log"]
    fr = failing.regions if failing.regions is not None else np.zeros(0, np.int64)
    cr = comparator.regions if comparator.regions is not None else np.zeros(0, np.int64)
    n = int(fr.size)
    parts = [
        f"graph break: {scores.get('lowering.graph_split_share', 0.0):.0%} of {n} failing "
        f"requests enter {np.median(fr) if n else 0:.0f} compiled regions "
        f"(comparator {np.median(cr) if cr.size else 0:.0f}, n={cr.size})"
    ]
    if ops:
        eager = ", ".join(f"{r['what']} x{r['per_request']} per request" for r in ops[:3])
        parts.append(f"eagerly between compiled graphs: {eager} (n={ops[0]['n']} requests)")
    action = "remove the graph break"
    if logged:
        top = logged[0]
        where = f"{top.get('file')}:{top.get('line')}" if top.get("file") else "(unknown frame)"
        code = f" `{top['code']}`" if top.get("code") else ""
        parts.append(f"compile log: '{top['reason']}' at {where}{code} ({top['n']} compilations)")
        action = f"remove the break at {where}"
        if top.get("hint"):
            action += f", or allow the op: {top['hint']}"
    elif ops:
        action = f"remove the host read ({ops[0]['what']}) between compiled graphs"
    numbers = {
        "failing_regions_p50": float(np.median(fr)) if n else None,
        "comparator_regions_p50": float(np.median(cr)) if cr.size else None,
        "split_share": scores.get("lowering.graph_split_share"),
        "eager_ops_between_graphs_p50": scores.get("lowering.eager_ops_between_graphs"),
        "n_failing": n,
        "n_comparator": int(cr.size),
        "eager_ops": {r["what"]: r["per_request"] for r in ops},
        "reasons": logged,
    }
    return BreakProof("; ".join(parts), numbers, action)
