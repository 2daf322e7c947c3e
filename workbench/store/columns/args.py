"""Columns taken from trace args (correlation, ids, stream, shape, bytes) and the launch
links between runtime calls and device activities; shared by every importer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from workbench.store.columns.packed_text import PackedText
from workbench.store.columns.trace_columns import TraceColumns

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})
# Activities that run on the device and were launched by a runtime call.
DEVICE_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation", "mtia_ccp_events"}
)


@dataclass
class ArgColumns:
    """Columns taken from args, plus the args text itself (or its packed chunks)."""

    correlation: I64
    correlation_valid: B1
    external_id: I64
    external_id_valid: B1
    stream: pa.Array | pa.ChunkedArray
    device: pa.Array | pa.ChunkedArray
    shape: pa.Array | pa.ChunkedArray
    nbytes: pa.Array | pa.ChunkedArray
    flops: pa.Array | pa.ChunkedArray
    text: pa.Array | pa.ChunkedArray | PackedText


_NUMERIC = ("correlation", "correlation_valid", "external_id", "external_id_valid")
_ARROW = ("stream", "device", "shape", "nbytes", "flops", "text")


def concat_args(parts: list[ArgColumns], keep: B1 | None) -> ArgColumns:
    """One ArgColumns from per-chunk parts (Arrow columns stay chunked: no copies)."""
    out: dict[str, Any] = {}
    for name in _NUMERIC:
        arrs = [getattr(p, name) for p in parts]
        out[name] = np.concatenate(arrs) if arrs else np.zeros(0, np.int64)
    # The parts of a packed decode share one PackedText (decode_args' text_sink).
    packed = parts[0].text if parts and isinstance(parts[0].text, PackedText) else None
    arrow = [name for name in _ARROW if packed is None or name != "text"]
    for name in arrow:
        arrs = [getattr(p, name) for p in parts]
        out[name] = pa.chunked_array(arrs, type=_TYPES[name])
    if keep is not None:
        mask = pa.array(keep)
        for name in _NUMERIC:
            out[name] = out[name][keep]
        for name in arrow:
            out[name] = out[name].filter(mask)
    if packed is not None:
        out["text"] = packed if keep is None else packed.filter(keep)
    return ArgColumns(**out)


_TYPES = {
    "stream": pa.int32(),
    "device": pa.int32(),
    "shape": pa.string(),
    "nbytes": pa.float64(),
    "flops": pa.float64(),
    "text": pa.string(),
}


def category_mask(category: pa.Array | pa.ChunkedArray, names: frozenset[str]) -> B1:
    """Boolean mask of events whose category is in names."""
    if isinstance(category, pa.DictionaryArray):
        hit = np.array([c in names for c in category.dictionary.to_pylist()], dtype=np.bool_)
        idx = np.asarray(category.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        return hit[idx] if hit.size else np.zeros(len(idx), dtype=np.bool_)
    mask = pc.is_in(category, value_set=pa.array(sorted(names), type=pa.string()))
    return np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.bool_)


def launch_links(cols: TraceColumns, args: ArgColumns, device: B1, runtime: B1) -> I64:
    """Index of the runtime call that launched each device activity (-1 when none).

    Joined on the correlation id; where a device event has none, a Kineto ac2g flow whose
    start sits on a runtime call and whose end sits on the device event links them.
    """
    n = cols.n
    out = np.full(n, -1, dtype=np.int64)
    rt = np.flatnonzero(runtime & args.correlation_valid)
    if rt.size:
        key = args.correlation[rt]
        order = np.argsort(key, kind="stable")
        skey = key[order]
        dv = np.flatnonzero(device & args.correlation_valid)
        pos = np.searchsorted(skey, args.correlation[dv])
        pos_c = np.minimum(pos, len(skey) - 1)
        hit = skey[pos_c] == args.correlation[dv]
        out[dv[hit]] = rt[order[pos_c[hit]]]
    _flow_links(cols, out, device)
    return out


def _flow_links(cols: TraceColumns, out: I64, device: B1) -> None:
    """Fill missing launch links from s/f flow pairs bound to events by (thread, ts)."""
    fl = cols.flows
    need = device & (out < 0)
    if fl.flow_id.size == 0 or not need.any():
        return
    threads, ev_code = np.unique(cols.thread, return_inverse=True)
    order = np.lexsort((cols.ts, ev_code))
    code_s, ts_s = ev_code[order], cols.ts[order]

    def bind(sel: B1) -> tuple[I64, I64]:
        """Event bound to each selected flow point: same thread, same ts (to 1 ns)."""
        fid, th, ts = fl.flow_id[sel], fl.thread[sel], fl.ts[sel]
        pos_t = np.minimum(np.searchsorted(threads, th), len(threads) - 1)
        known = threads[pos_t] == th
        code = pos_t
        # Binary search on (thread code, ts) as one lexicographic search: thread block first.
        lo = np.searchsorted(code_s, code, side="left")
        hi = np.searchsorted(code_s, code, side="right")
        found = np.full(len(ts), -1, dtype=np.int64)
        # ts is sorted inside each thread block, so a global search on ts offset by block works.
        rel = np.empty(len(ts), dtype=np.int64)
        for c in np.unique(code[known]).tolist():
            m = np.flatnonzero(known & (code == c))
            block = ts_s[lo[m[0]] : hi[m[0]]]
            rel[m] = lo[m[0]] + np.searchsorted(block, ts[m] - 1e-3)
        j = np.minimum(rel, len(ts_s) - 1)
        ok = known & (rel < hi) & (np.abs(ts_s[j] - ts) < 1e-3)
        found[ok] = order[j[ok]]
        return fid, found

    s_id, s_ev = bind(fl.phase == ord("s"))
    f_id, f_ev = bind(fl.phase == ord("f"))
    if s_id.size == 0 or f_id.size == 0:
        return
    so = np.argsort(s_id, kind="stable")
    pos = np.minimum(np.searchsorted(s_id[so], f_id), len(so) - 1)
    match = (s_id[so][pos] == f_id) & (f_ev >= 0)
    src = s_ev[so][pos]
    ok = match & (src >= 0)
    tgt = f_ev[ok]
    src = src[ok]
    fill = need[tgt]
    out[tgt[fill]] = src[fill]
