"""torch.compile in a trace: one flagged event per compilation, and compile ids on events."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.store.attribution.nesting import top_level
from workbench.store.attribution.rules import PairCodes, Rules, pair_mask

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]


@dataclass
class CompileMarks:
    recompile: B1
    compile_id: pa.Array
    compilations: int


def mark_fallback(
    rules: Rules,
    pairs: PairCodes,
    ts: F64,
    end: F64,
    thread: I64,
    spans: B1,
    request_of: I64,
) -> pa.Array:
    """events.fallback: operators of a request that ran outside compiled code.

    Only meaningful where compiled regions ran at all; otherwise the column stays null.
    """
    n = len(ts)
    region = spans & pair_mask(pairs, lambda _c, nm: bool(rules.compile_region.search(nm or "")))
    if not region.any():
        return pa.nulls(n, pa.bool_())
    compiled = region | (
        spans
        & pair_mask(
            pairs,
            lambda c, nm: (
                (not rules.compile_categories or c in rules.compile_categories)
                and bool(rules.compile_span.search(nm or ""))
            ),
        )
    )
    op = pair_mask(
        pairs,
        lambda c, nm: (
            (not rules.fallback_categories or c in rules.fallback_categories)
            and bool(rules.fallback_op.search(nm or ""))
        ),
    )
    cand = np.flatnonzero(op & (request_of >= 0))
    inside = np.zeros(cand.size, dtype=np.bool_)
    outer = top_level(np.flatnonzero(compiled), thread, ts, end)
    for th in np.unique(thread[outer]).tolist():
        o = outer[thread[outer] == th]
        o = o[np.argsort(ts[o], kind="stable")]
        sel = np.flatnonzero(thread[cand] == th)
        c = cand[sel]
        pos = np.searchsorted(ts[o], ts[c], side="right") - 1
        ok = pos >= 0
        inside[sel[ok]] = end[o[pos[ok]]] >= end[c[ok]]
    out = np.zeros(n, dtype=np.bool_)
    out[cand[~inside]] = True
    return pa.array(out)


def _direct_ids(rules: Rules, pairs: PairCodes) -> list[str | None]:
    out: list[str | None] = []
    for name in pairs.names:
        m = rules.compile_id.search(name or "")
        out.append(next((g for g in m.groups() if g), None) if m else None)
    return out


def mark_compiles(
    rules: Rules, pairs: PairCodes, ts: F64, end: F64, thread: I64, spans: B1
) -> CompileMarks:
    """Flag the outermost compile span of each compilation; spread its id over what it holds.

    The id comes from the span's own name or the first nested span naming one
    ("dynamo_data: compile_id=0/3"); compiled-region spans keep the id in their own name.
    """
    n = len(ts)
    per_pair = _direct_ids(rules, pairs)
    direct_codes = np.array([-1 if v is None else i for i, v in enumerate(per_pair)], np.int64)
    direct = direct_codes[pairs.inverse] if direct_codes.size else np.full(n, -1, np.int64)
    is_span = spans & pair_mask(
        pairs,
        lambda c, nm: (
            (not rules.compile_categories or c in rules.compile_categories)
            and bool(rules.compile_span.search(nm or ""))
        ),
    )
    outer = top_level(np.flatnonzero(is_span), thread, ts, end)
    recompile = np.zeros(n, dtype=np.bool_)
    recompile[outer] = True
    code = np.where(
        pair_mask(pairs, lambda _c, nm: bool(rules.compile_region.search(nm or ""))), direct, -1
    )
    if outer.size:
        order = np.lexsort((ts, thread))
        th_s, ts_s = thread[order], ts[order]
        for i in outer.tolist():
            lo = np.searchsorted(th_s, thread[i], side="left")
            hi = np.searchsorted(th_s, thread[i], side="right")
            a = lo + np.searchsorted(ts_s[lo:hi], ts[i], side="left")
            b = lo + np.searchsorted(ts_s[lo:hi], end[i], side="right")
            inner = order[a:b]
            inner = inner[end[inner] <= end[i]]
            named = inner[direct[inner] >= 0]
            own = direct[i]
            if own < 0 and named.size:
                own = direct[named[np.argmin(ts[named])]]
            if own >= 0:
                code[inner] = own
                code[i] = own
    ids = pa.array([*per_pair, None], type=pa.string())
    compile_id = ids.take(pa.array(np.where(code >= 0, code, len(per_pair))))
    return CompileMarks(recompile, compile_id, int(outer.size))
