"""Chrome-trace events into columns: the typed event record the reader decodes into, and the
builder that keeps events as numpy and Arrow columns (B/E pairs joined, flows and metadata
taken apart, names and categories dictionary-encoded).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.errors import WorkbenchError

# The one default args object: identity tells "no args key" apart from an empty object.
NO_ARGS = msgspec.Raw(b"{}")

# Phases that become event rows; B/E pairs become one row each. M and flows are consumed.
ROW_PHASES = frozenset("XiIC")
FLOW_PHASES = frozenset("stf")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
B1 = npt.NDArray[np.bool_]


class TraceEvent(msgspec.Struct, gc=False):
    """One Chrome-trace event; args stay raw so that only needed keys are decoded later."""

    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: msgspec.Raw = NO_ARGS


class _MetaArgs(msgspec.Struct):
    name: str | None = None


@dataclass
class Flows:
    """Flow events (s/t/f): id, phase letter code, thread key and raw timestamp."""

    flow_id: I64
    phase: U8
    thread: I64
    ts: F64


@dataclass
class TraceColumns:
    """Kept events as columns, in file order (B/E pairs at the position of their B)."""

    category_codes: I32
    categories: list[str | None]
    name_codes: I32
    names: list[str | None]
    phase: U8
    ts: F64
    dur: F64
    pid: I64
    pid_valid: B1
    tid: I64
    tid_valid: B1
    thread: I64
    flows: Flows
    process_names: dict[int, str]
    thread_names: dict[int, str]
    read_by_phase: dict[str, int]
    kept_by_phase: dict[str, int]
    skipped_by_phase: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.ts)

    @property
    def category(self) -> pa.DictionaryArray:
        return _dict_array(self.category_codes, self.categories)

    @property
    def name(self) -> pa.DictionaryArray:
        return _dict_array(self.name_codes, self.names)


def _dict_array(codes: I32, values: list[str | None]) -> pa.DictionaryArray:
    dictionary = pa.array(values, type=pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32()), dictionary)


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# Microseconds a float64 holds exactly (285 years): a ts or dur past it is no real trace's.
TIME_LIMIT_US = float(1 << 53)


class _PastInt64(ValueError):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class _Keys:
    """Integer keys for pid/tid values, which may be numbers or strings ("Spans")."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}

    def column(self, values: Sequence[Any]) -> tuple[I64, B1, I64]:
        """(int value or 0, is-int mask, key unique per distinct value)."""
        try:
            ints = np.array(values, dtype=np.int64)
            return ints, np.ones(len(values), dtype=np.bool_), ints
        except (TypeError, ValueError, OverflowError):
            pass
        for v in values:
            if v.__class__ is int and not _I64_MIN <= v <= _I64_MAX:
                raise _PastInt64(v)
        codes = self.strings
        keys = [
            v if v.__class__ is int else codes.setdefault(str(v), -(1 << 62) - len(codes))
            for v in values
        ]
        valid = np.array([v.__class__ is int for v in values], dtype=np.bool_)
        key_arr = np.array(keys, dtype=np.int64)
        return np.where(valid, key_arr, 0), valid, key_arr


class _Strings:
    """A growing dictionary of strings; chunks map their values to global int32 codes."""

    def __init__(self) -> None:
        self.codes: dict[str | None, int] = {}
        self.values: list[str | None] = []

    def encode(self, values: list[str | None]) -> I32:
        codes = self.codes
        try:
            # A trace names a few hundred things over and over: after the first chunk every
            # value is usually known, and a lookup each is ~5x cheaper than an Arrow encode.
            return np.fromiter(map(codes.__getitem__, values), dtype=np.int32, count=len(values))
        except KeyError:
            pass
        for v in dict.fromkeys(values):  # new values numbered in order of first appearance
            if v not in codes:
                codes[v] = len(self.values)
                self.values.append(v)
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int32, count=len(values))


def thread_key(pid_key: I64, tid_key: I64) -> I64:
    """One int64 per (pid, tid) pair, for grouping by thread."""
    # Hashing keeps the key 64-bit; collisions need two threads whose mixed keys coincide.
    mixed = (pid_key.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ tid_key.astype(np.uint64)
    return mixed.view(np.int64)


def _phase_codes(phs: Sequence[str]) -> U8:
    """Each phase's letter code; 0 for a phase that is not one ASCII character."""
    joined = "".join(phs)
    # Lengths summing to the count are all 1 only when none is longer ("XX" beside "").
    if len(joined) == len(phs) and joined.isascii() and max(map(len, phs), default=1) == 1:
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8).copy()
    return np.array([ord(p[0]) if len(p) == 1 and p.isascii() else 0 for p in phs], np.uint8)


def _first(codes: U8, code: int) -> int:
    return int(np.argmax(codes == code))


_ROW = np.zeros(256, dtype=np.bool_)
_ROW[[ord(p) for p in ROW_PHASES]] = True
_ROW[ord("B")] = True  # kept provisionally; dropped at the end when no E closes it
_FLOW = np.zeros(256, dtype=np.bool_)
_FLOW[[ord(p) for p in FLOW_PHASES]] = True


class ColumnBuilder:
    """Accumulates kept events chunk by chunk; finish() pairs B/E and returns the columns."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.keys = _Keys()
        self.flow_keys = _Keys()
        self.cats = _Strings()
        self.names = _Strings()
        self.read: Counter[str] = Counter()
        self.parts: dict[str, list[Any]] = {}
        self.flow_parts: dict[str, list[Any]] = {}
        self.e_parts: dict[str, list[Any]] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[int, str] = {}
        self.seen = 0
        self._meta = msgspec.json.Decoder(_MetaArgs)

    def _put(self, parts: dict[str, list[Any]], **cols: Any) -> None:
        for k, v in cols.items():
            parts.setdefault(k, []).append(v)

    def add(self, events: list[TraceEvent]) -> list[msgspec.Raw]:
        """Take one chunk; returns the args of its kept rows, in order, for the caller."""
        base = self.seen
        self.seen += len(events)
        phs = [e.ph for e in events]
        codes = _phase_codes(phs)
        if codes.all():  # one ASCII letter each: counted from the codes, not the strings
            counts = np.bincount(codes, minlength=256)
            seen = np.flatnonzero(counts).tolist()
            # Phases first met here are keyed in order of appearance, as Counter.update does.
            new = sorted(
                (c for c in seen if chr(c) not in self.read), key=lambda c: _first(codes, c)
            )
            for c in new:
                self.read[chr(c)] = 0
            for c in seen:
                self.read[chr(c)] += int(counts[c])
        else:
            self.read.update(phs)
        del phs
        try:
            pid, pid_valid, pid_key = self.keys.column([e.pid for e in events])
            tid, tid_valid, tid_key = self.keys.column([e.tid for e in events])
            flow_ids = [events[i].id for i in np.flatnonzero(_FLOW[codes]).tolist()]
            flow_keys = self.flow_keys.column(flow_ids)[2] if flow_ids else None
        except _PastInt64 as exc:
            raise WorkbenchError(
                self.subject, f"a pid, tid or id of {exc.value} is past the 64-bit integer range"
            ) from None
        thread = thread_key(pid_key, tid_key)
        ts = np.array([e.ts for e in events], dtype=np.float64)
        keep = _ROW[codes]
        bad = keep & np.isnan(ts)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise WorkbenchError(
                self.subject, f"event {base + first} (phase {events[first].ph!r}) has no ts"
            )
        idx = np.flatnonzero(keep)
        kept = events if len(idx) == len(events) else [events[i] for i in idx.tolist()]
        dur = np.array([e.dur for e in kept], dtype=np.float64)
        self._put(
            self.parts,
            index=idx + base,
            phase=codes[idx],
            ts=ts[idx],
            dur=dur,
            pid=pid[idx],
            pid_valid=pid_valid[idx],
            tid=tid[idx],
            tid_valid=tid_valid[idx],
            thread=thread[idx],
            cat=self.cats.encode([e.cat for e in kept]),
            name=self.names.encode([e.name for e in kept]),
        )
        args = [e.args for e in kept]
        del kept
        e_idx = np.flatnonzero(codes == ord("E"))
        if e_idx.size:
            if np.isnan(ts[e_idx]).any():
                raise WorkbenchError(self.subject, "an E event has no ts")
            self._put(self.e_parts, index=e_idx + base, thread=thread[e_idx], ts=ts[e_idx])
        f_idx = np.flatnonzero(_FLOW[codes])
        if f_idx.size:
            self._put(
                self.flow_parts, flow_id=flow_keys, phase=codes[f_idx], thread=thread[f_idx],
                ts=ts[f_idx],
            )  # fmt: skip
        for i in np.flatnonzero(codes == ord("M")).tolist():
            self._metadata(events[i], int(pid_key[i]), int(thread[i]))
        return args

    def _metadata(self, e: TraceEvent, pid_key: int, thread: int) -> None:
        if e.name not in ("process_name", "thread_name") or e.args is NO_ARGS:
            return
        try:
            label = self._meta.decode(e.args).name
        except msgspec.MsgspecError:
            return
        if label is None:
            return
        if e.name == "process_name":
            self.process_names[pid_key] = label
        else:
            self.thread_names[thread] = label

    def finish(self) -> tuple[TraceColumns, B1 | None]:
        """Columns of all kept rows, and the mask of rows kept after B/E pairing (None = all)."""
        cat = self._cat(self.parts)
        warnings: list[str] = []
        phase = cat("phase", np.uint8)
        ts, dur = cat("ts", np.float64), cat("dur", np.float64)
        thread = cat("thread", np.int64)
        keep_rows: B1 | None = None
        b_rows = np.flatnonzero(phase == ord("B"))
        matched = 0
        if b_rows.size or self.e_parts:
            e = self._cat(self.e_parts)
            keep_rows, matched = _pair(
                cat("index", np.int64), b_rows, thread, ts, dur,
                e("index", np.int64), e("thread", np.int64), e("ts", np.float64), warnings,
            )  # fmt: skip
        dur = np.nan_to_num(dur, nan=0.0)
        if (dur < 0).any():
            warnings.append(f"{int((dur < 0).sum())} events with negative dur were set to 0")
            dur = np.maximum(dur, 0.0)
        huge = ~(np.abs(ts) <= TIME_LIMIT_US) | ~(dur <= TIME_LIMIT_US)
        if keep_rows is not None:
            huge &= keep_rows
        out_of_range = Counter(chr(c) for c in phase[huge].tolist())
        if out_of_range:
            warnings.append(
                f"{int(huge.sum())} events with ts or dur past 2**53 us (285 years, or not "
                "finite) were skipped"
            )
            keep_rows = ~huge if keep_rows is None else keep_rows & ~huge
        f = self._cat(self.flow_parts)
        flows = Flows(f("flow_id", np.int64), f("phase", np.uint8), f("thread", np.int64),
                      f("ts", np.float64))  # fmt: skip
        cols = TraceColumns(
            category_codes=cat("cat", np.int32),
            categories=self.cats.values,
            name_codes=cat("name", np.int32),
            names=self.names.values,
            phase=phase,
            ts=ts,
            dur=dur,
            pid=cat("pid", np.int64),
            pid_valid=cat("pid_valid", np.bool_),
            tid=cat("tid", np.int64),
            tid_valid=cat("tid_valid", np.bool_),
            thread=thread,
            flows=flows,
            process_names=self.process_names,
            thread_names=self.thread_names,
            read_by_phase=dict(self.read),
            kept_by_phase={},
            skipped_by_phase={},
            warnings=warnings,
        )
        if keep_rows is not None:
            _filter(cols, keep_rows)
        self._count(cols, matched)
        for ph, n in out_of_range.items():
            key = "B/E" if ph == "B" else ph
            cols.skipped_by_phase[key] = cols.skipped_by_phase.get(key, 0) + n
        return cols, keep_rows

    def _cat(self, parts: dict[str, list[Any]]) -> Any:
        def get(key: str, dtype: Any) -> Any:
            chunks = parts.get(key)
            return np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)

        return get

    def _count(self, cols: TraceColumns, matched: int) -> None:
        values, counts = np.unique(cols.phase, return_counts=True)
        cols.kept_by_phase = {
            ("B/E" if chr(v) == "B" else chr(v)): int(c)
            for v, c in zip(values.tolist(), counts.tolist(), strict=True)
        }
        skipped = dict(self.read)
        for p in ROW_PHASES:
            skipped.pop(p, None)
        for p in ("B", "E"):
            if p in skipped:
                skipped[p] -= matched
        cols.skipped_by_phase = {p: n for p, n in skipped.items() if n}


def _pair(
    index: I64,
    b_rows: I64,
    thread: I64,
    ts: F64,
    dur: F64,
    e_index: I64,
    e_thread: I64,
    e_ts: F64,
    warnings: list[str],
) -> tuple[B1, int]:
    """Match B/E per thread as stacks in file order; sets dur of matched B rows in place."""
    n_b = len(b_rows)
    order = np.argsort(np.concatenate([index[b_rows], e_index]), kind="stable")
    stacks: dict[int, list[int]] = {}
    keep = np.ones(len(index), dtype=np.bool_)
    keep[b_rows] = False
    orphans = 0
    matched = 0
    for k in order.tolist():
        if k < n_b:
            row = int(b_rows[k])
            stacks.setdefault(int(thread[row]), []).append(row)
            continue
        j = k - n_b
        stack = stacks.get(int(e_thread[j]))
        if stack:
            row = stack.pop()
            dur[row] = e_ts[j] - ts[row]
            keep[row] = True
            matched += 1
        else:
            orphans += 1
    open_b = sum(len(s) for s in stacks.values())
    if open_b:
        warnings.append(f"{open_b} B events without a matching E were skipped")
    if orphans:
        warnings.append(f"{orphans} E events without a matching B were skipped")
    return keep, matched


def _filter(cols: TraceColumns, keep: B1) -> None:
    for name in (
        "category_codes", "name_codes", "phase", "ts", "dur", "pid", "pid_valid", "tid",
        "tid_valid", "thread",
    ):  # fmt: skip
        setattr(cols, name, getattr(cols, name)[keep])
