"""The engine steps of an LLM serving trace, from its `llm.*` annotations (SERVING_SPEC).

`engine_steps(events) -> EngineSteps | None` reads a decoded trace's events (columns name, ts_us,
dur_us, tid, pid, stage; category is used when present) and returns, per `llm.step#k` span, its
phase times, members (`llm.seq#rid prefill a:b | decode`), preemptions, the tokenize spans and
the engine thread's flat stage timeline (innermost span wins); None when there are no steps.
`step_table(steps) -> pa.Table` is one row per step, for the triage's witness tests;
`stage_before(steps, t)` the timeline's per-stage prefix sums (time of each stage before t).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from accel.stages import OTHER, STAGES
from workbench.store.attribution.nesting import enclosing
from workbench.store.attribution.rules import Rules, load_rules

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
F64 = npt.NDArray[np.float64]
Strs = npt.NDArray[np.str_]

# The serving loop's record_function names: the one place they are spelled.
PREFIX: Final[str] = "llm."
STEP: Final[re.Pattern[str]] = re.compile(r"^llm\.step#(?P<k>\d+)$")
TOKENIZE: Final[re.Pattern[str]] = re.compile(r"^llm\.tokenize#(?P<rid>\S+)$")
SCHEDULE: Final[re.Pattern[str]] = re.compile(r"^llm\.schedule$")
SEQ: Final[re.Pattern[str]] = re.compile(
    r"^llm\.seq#(?P<rid>\S+) (?:prefill (?P<a>\d+):(?P<b>\d+)|(?P<decode>decode))$"
)
PREEMPT: Final[re.Pattern[str]] = re.compile(r"^llm\.preempt#(?P<rid>\S+)$")
FORWARD: Final[re.Pattern[str]] = re.compile(r"^llm\.forward$")
SAMPLE: Final[re.Pattern[str]] = re.compile(r"^llm\.sample$")
DETOKENIZE: Final[re.Pattern[str]] = re.compile(r"^llm\.detokenize$")

# Timeline stage codes: STAGES then other (0 ingress .. 4 assembly, 5 other).
STAGE_NAMES: Final[tuple[str, ...]] = (*STAGES, OTHER)
INGRESS, LOWERING, SCHEDULING, EXECUTION, ASSEMBLY, IDLE = range(6)
PREFILL: Final[int] = 0
DECODE: Final[int] = 1
# Kineto repeats record_function ranges on the GPU timeline; they are not the engine thread.
_GPU_ANNOTATION: Final[str] = "gpu_user_annotation"
_MAX_DEPTH: Final[int] = 256

# Phase spans of a step: per-step time column and timeline stage.
_PHASES: Final[tuple[tuple[re.Pattern[str], str, int], ...]] = (
    (TOKENIZE, "tokenize_us", INGRESS),
    (SCHEDULE, "schedule_us", SCHEDULING),
    (PREEMPT, "preempt_us", SCHEDULING),
    (FORWARD, "forward_us", EXECUTION),
    (SAMPLE, "sample_us", EXECUTION),
    (DETOKENIZE, "detokenize_us", ASSEMBLY),
)
PHASE_COLUMNS: Final[tuple[str, ...]] = (*(p[1] for p in _PHASES), "compile_us")


@dataclass
class EngineSteps:
    """Per step (sorted by start): number k, start/end, phase times (span durations; compile_us
    is lowering time inside the step), detokenize span (NaN when absent) and member counts.
    Flat tables: members, preemptions, tokenize spans, and the engine thread's timeline."""

    number: I64
    start: F64
    end: F64
    phase: dict[str, F64]  # PHASE_COLUMNS -> per-step microseconds
    detok_start: F64
    detok_end: F64
    prefill_tokens: I64
    n_prefill: I64
    n_decode: I64
    member_step: I64  # index into the step arrays
    member_request: Strs
    member_role: I8  # PREFILL / DECODE
    member_tokens: I64  # b - a for prefill, 0 for decode
    preempt_step: I64  # -1 when outside every step
    preempt_request: Strs
    tokenize_request: Strs
    tokenize_start: F64
    tokenize_end: F64
    seg_start: F64  # contiguous segments: seg_end[i] == seg_start[i + 1]
    seg_end: F64
    seg_stage: I8  # index into STAGE_NAMES
    pid: int
    tid: int
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of steps."""
        return int(self.number.size)


def _strings(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    return arr


def _numbers(table: pa.Table, name: str, dtype: type) -> npt.NDArray[np.generic]:
    col = table.column(name)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)


def _engine_thread(
    names: list[str], pids: I64, tids: I64, gpu: npt.NDArray[np.bool_]
) -> tuple[int, int] | None:
    """The (pid, tid) with the most llm.step spans, ties to the one with most llm.* spans."""
    counts: dict[tuple[int, int], list[int]] = {}
    for name, p, t, g in zip(names, pids.tolist(), tids.tolist(), gpu.tolist(), strict=True):
        if g:
            continue
        c = counts.setdefault((p, t), [0, 0])
        c[0] += STEP.match(name) is not None
        c[1] += 1
    best = max(counts.items(), key=lambda kv: (kv[1][0], kv[1][1]), default=None)
    if best is None or best[1][0] == 0:
        return None
    return best[0]


def _timeline(s: F64, e: F64, code: I8) -> tuple[F64, F64, I8]:
    """Flat segments from possibly nested intervals: at each instant the innermost covering
    interval's code, IDLE where none covers; adjacent equal codes merged."""
    if s.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int8)
    order = np.lexsort((-e, s)).astype(np.int64)
    ss, ee, cc = s[order], e[order], code[order]
    parent = enclosing(np.zeros(s.size, dtype=np.int64), ss, ee, np.arange(s.size))
    bounds = np.unique(np.concatenate([ss, ee]))
    x = bounds[:-1]
    if x.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int8)
    # The last interval starting at or before x, then up its ancestors until one covers x:
    # with proper nesting the first that does is the innermost.
    j = np.searchsorted(ss, x, side="right").astype(np.int64) - 1
    for _ in range(_MAX_DEPTH):
        bad = np.flatnonzero((j >= 0) & (ee[np.maximum(j, 0)] <= x))
        if bad.size == 0:
            break
        j[bad] = parent[j[bad]]
    seg = np.where(j >= 0, cc[np.maximum(j, 0)], IDLE).astype(np.int8)
    keep = np.ones(seg.size, dtype=bool)
    keep[1:] = seg[1:] != seg[:-1]
    starts = x[keep]
    ends = np.append(starts[1:], bounds[-1])
    return starts, ends, seg[keep]


def stage_before(steps: EngineSteps, t: F64) -> F64:
    """F[s, i] = time of stage-s timeline segments before t[i] (shape (6, len(t)))."""
    out = np.zeros((len(STAGE_NAMES), t.size))
    if steps.seg_start.size == 0 or t.size == 0:
        return out
    length = steps.seg_end - steps.seg_start
    cum = np.zeros((len(STAGE_NAMES), steps.seg_start.size + 1))
    for s in range(len(STAGE_NAMES)):
        cum[s, 1:] = np.cumsum(np.where(steps.seg_stage == s, length, 0.0))
    i = np.searchsorted(steps.seg_start, t, side="right") - 1
    inside = i >= 0
    ii = np.maximum(i, 0)
    part = np.clip(t - steps.seg_start[ii], 0.0, length[ii])
    out[:, :] = np.where(inside, cum[:, ii], 0.0)
    rows = steps.seg_stage[ii].astype(np.int64)
    cols = np.flatnonzero(inside)
    out[rows[cols], cols] += part[cols]
    return out


def _in_step(start: F64, end: F64, s: F64, e: F64) -> I64:
    """Index of the step holding each span [s, e], or -1."""
    j = np.searchsorted(start, s, side="right").astype(np.int64) - 1
    ok = (j >= 0) & (e <= end[np.maximum(j, 0)])
    return np.where(ok, j, -1)


def engine_steps(events: pa.Table) -> EngineSteps | None:
    """The engine steps of a trace's events, or None when it holds no `llm.step#k` spans."""
    if events.num_rows == 0:
        return None
    names_all = _strings(events.column("name"))
    is_llm = pc.fill_null(pc.starts_with(names_all, PREFIX), False)
    llm_idx = np.flatnonzero(is_llm.to_numpy(zero_copy_only=False))
    if llm_idx.size == 0:
        return None
    ts = _numbers(events, "ts_us", np.float64).astype(np.float64)
    dur = np.nan_to_num(_numbers(events, "dur_us", np.float64).astype(np.float64), nan=0.0)
    pid = np.nan_to_num(_numbers(events, "pid", np.float64), nan=-1).astype(np.int64)
    tid = np.nan_to_num(_numbers(events, "tid", np.float64), nan=-1).astype(np.int64)
    gpu = np.zeros(events.num_rows, dtype=bool)
    if "category" in events.column_names:
        cat = _strings(events.column("category"))
        gpu = pc.fill_null(pc.equal(cat, _GPU_ANNOTATION), False).to_numpy(zero_copy_only=False)
    names: list[str] = names_all.take(pa.array(llm_idx)).to_pylist()
    thread = _engine_thread(names, pid[llm_idx], tid[llm_idx], gpu[llm_idx])
    if thread is None:
        return None
    warnings: list[str] = []
    on = (pid[llm_idx] == thread[0]) & (tid[llm_idx] == thread[1]) & ~gpu[llm_idx]
    if not on.all():
        off = int((~on & ~gpu[llm_idx]).sum())
        if off:
            warnings.append(f"{off} llm.* spans not on the engine thread were left out")
    idx = llm_idx[on]
    names = [n for n, keep in zip(names, on.tolist(), strict=True) if keep]
    s_all, e_all = ts[idx], ts[idx] + dur[idx]

    # One pass over the few llm.* spans: classify by name.
    kind = np.full(idx.size, -1, dtype=np.int64)  # -2 step, -3 seq, else phase index
    step_k: list[int] = []
    seq_rid: list[str] = []
    seq_role: list[int] = []
    seq_tok: list[int] = []
    rid_of: list[str] = [""] * idx.size
    for i, name in enumerate(names):
        if m := STEP.match(name):
            kind[i] = -2
            step_k.append(int(m["k"]))
            continue
        if m := SEQ.match(name):
            kind[i] = -3
            seq_rid.append(m["rid"])
            decode = m["decode"] is not None
            seq_role.append(DECODE if decode else PREFILL)
            seq_tok.append(0 if decode else max(0, int(m["b"]) - int(m["a"])))
            continue
        for p, (pat, _col, _code) in enumerate(_PHASES):
            if m := pat.match(name):
                kind[i] = p
                rid_of[i] = m.groupdict().get("rid") or ""
                break
    steps_at = np.flatnonzero(kind == -2)
    order = np.argsort(s_all[steps_at], kind="stable")
    steps_at = steps_at[order]
    number = np.asarray(step_k, dtype=np.int64)[order]
    start, end = s_all[steps_at], e_all[steps_at]
    n = number.size

    phase: dict[str, F64] = {}
    detok_start = np.full(n, np.nan)
    detok_end = np.full(n, np.nan)
    for p, (_pat, col, _code) in enumerate(_PHASES):
        at = np.flatnonzero(kind == p)
        j = _in_step(start, end, s_all[at], e_all[at])
        ok = j >= 0
        phase[col] = np.bincount(j[ok], weights=e_all[at][ok] - s_all[at][ok], minlength=n).astype(
            np.float64
        )
        if col == "detokenize_us":
            # The step's last detokenize span is where its tokens are emitted.
            detok_start[j[ok]] = s_all[at][ok]
            detok_end[j[ok]] = e_all[at][ok]

    seq_at = np.flatnonzero(kind == -3)
    sj = _in_step(start, end, s_all[seq_at], e_all[seq_at])
    if (sj < 0).any():
        warnings.append(f"{int((sj < 0).sum())} llm.seq spans outside every step were left out")
    keep = sj >= 0
    member_step = sj[keep]
    member_request = np.asarray(seq_rid, dtype=np.str_)[keep]
    member_role = np.asarray(seq_role, dtype=np.int8)[keep]
    member_tokens = np.asarray(seq_tok, dtype=np.int64)[keep]
    prefill = member_role == PREFILL
    n_prefill = np.bincount(member_step[prefill], minlength=n).astype(np.int64)
    n_decode = np.bincount(member_step[~prefill], minlength=n).astype(np.int64)
    prefill_tokens = np.bincount(member_step, weights=member_tokens, minlength=n)

    pre_at = np.flatnonzero(kind == _phase_index(PREEMPT))
    tok_at = np.flatnonzero(kind == _phase_index(TOKENIZE))
    rids = np.asarray(rid_of, dtype=np.str_) if idx.size else np.zeros(0, dtype=np.str_)

    # Timeline intervals: steps (idle inside them is other), phase spans by stage, and the
    # engine thread's lowering-stage events (torch.compile inside llm.forward).
    codes = np.full(idx.size, IDLE, dtype=np.int8)
    for p, (_pat, _col, code) in enumerate(_PHASES):
        codes[kind == p] = code
    codes[kind == -3] = SCHEDULING
    iv = kind != -1
    low_s, low_e, compiling = _lowering(events, ts, dur, pid, tid, thread, gpu)
    seg_start, seg_end, seg_stage = _timeline(
        np.concatenate([s_all[iv], low_s]),
        np.concatenate([e_all[iv], low_e]),
        np.concatenate([codes[iv], np.full(low_s.size, LOWERING, dtype=np.int8)]),
    )
    steps = EngineSteps(
        number=number,
        start=start,
        end=end,
        phase=phase,
        detok_start=detok_start,
        detok_end=detok_end,
        prefill_tokens=prefill_tokens.astype(np.int64),
        n_prefill=n_prefill,
        n_decode=n_decode,
        member_step=member_step,
        member_request=member_request,
        member_role=member_role,
        member_tokens=member_tokens,
        preempt_step=_in_step(start, end, s_all[pre_at], e_all[pre_at]),
        preempt_request=rids[pre_at],
        tokenize_request=rids[tok_at],
        tokenize_start=s_all[tok_at],
        tokenize_end=e_all[tok_at],
        seg_start=seg_start,
        seg_end=seg_end,
        seg_stage=seg_stage,
        pid=thread[0],
        tid=thread[1],
        warnings=warnings,
    )
    # Compiling, not running compiled code or checking its guards: the longest compile span
    # inside the step (the outermost of its nested compile phases).
    cj = _in_step(start, end, low_s[compiling], low_e[compiling])
    compile_us = np.zeros(n)
    np.maximum.at(compile_us, cj[cj >= 0], (low_e[compiling] - low_s[compiling])[cj >= 0])
    steps.phase["compile_us"] = compile_us
    return steps


@functools.cache
def _compile_rules() -> Rules:
    """The default rules' compile patterns: which lowering events compile, which run compiled
    code (the engine timeline is read at triage too, where no import's rules are at hand)."""
    return load_rules()


def _phase_index(pat: re.Pattern[str]) -> int:
    return next(i for i, p in enumerate(_PHASES) if p[0] is pat)


def _lowering(
    events: pa.Table,
    ts: F64,
    dur: F64,
    pid: I64,
    tid: I64,
    thread: tuple[int, int],
    gpu: npt.NDArray[np.bool_],
) -> tuple[F64, F64, npt.NDArray[np.bool_]]:
    """Spans of the engine thread's lowering-stage events (not llm.* ones, not compiled
    regions) and which of them are compile spans, vectorized."""
    if "stage" not in events.column_names:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.bool_)
    stage = _strings(events.column("stage"))
    low = pc.fill_null(pc.equal(stage, STAGES[LOWERING]), False).to_numpy(zero_copy_only=False)
    names = _strings(events.column("name"))
    llm = pc.fill_null(pc.starts_with(names, PREFIX), False).to_numpy(zero_copy_only=False)
    # A compiled region is the compiled code running (the forward itself), not compiling: the
    # attribution keeps only its gaps as lowering, and so does the engine's timeline.
    region = pc.fill_null(
        pc.match_substring_regex(names, _compile_rules().compile_region.pattern), False
    ).to_numpy(zero_copy_only=False)
    mask = low & ~llm & ~region & ~gpu & (pid == thread[0]) & (tid == thread[1]) & (dur > 0)
    span = pc.fill_null(
        pc.match_substring_regex(names, _compile_rules().compile_span.pattern), False
    ).to_numpy(zero_copy_only=False)
    return ts[mask], ts[mask] + dur[mask], span[mask]


def stalled_decodes(steps: EngineSteps) -> I64:
    """Per step: requests that had begun decoding, were not done, and took no part in it
    (their next token waited for this step), vectorized."""
    dec = steps.member_role == DECODE
    if not dec.any():
        return np.zeros(steps.n, dtype=np.int64)
    codes, inv = np.unique(steps.member_request, return_inverse=True)
    first = np.full(codes.size, steps.n, dtype=np.int64)
    last = np.full(codes.size, -1, dtype=np.int64)
    np.minimum.at(first, inv[dec], steps.member_step[dec])
    np.maximum.at(last, inv[dec], steps.member_step[dec])
    live = first < last  # at least two decode steps: an open interval between them
    diff = np.zeros(steps.n + 1, dtype=np.int64)
    np.add.at(diff, first[live] + 1, 1)
    np.add.at(diff, last[live], -1)
    covering = np.cumsum(diff)[: steps.n]
    # Subtract the steps those requests did take part in, strictly between their ends.
    s, r = steps.member_step, inv
    inside = live[r] & (s > first[r]) & (s < last[r])
    np.subtract.at(covering, s[inside], 1)
    # A request listed twice in one step (two spans) must not count below zero.
    return np.maximum(covering, 0)


@dataclass(frozen=True)
class MemberStep:
    """One engine step a request took part in: its part (a prefill chunk or a decode), the
    other requests in the step, and whether the request was preempted in it."""

    number: int
    start_us: float
    end_us: float
    role: int  # PREFILL / DECODE
    tokens: int  # prefill chunk length (0 for a decode)
    mates: list[str]
    preempted: bool


def member_steps(steps: EngineSteps, request_id: str) -> list[MemberStep]:
    """The steps `request_id` took part in, in time order, each with its batch mates."""
    mine = np.flatnonzero(steps.member_request == request_id)
    preempted = set(steps.preempt_step[steps.preempt_request == request_id].tolist())
    out = []
    for m in mine.tolist():
        j = int(steps.member_step[m])
        mates = steps.member_request[
            (steps.member_step == j) & (steps.member_request != request_id)
        ]
        out.append(MemberStep(
            number=int(steps.number[j]), start_us=float(steps.start[j]),
            end_us=float(steps.end[j]), role=int(steps.member_role[m]),
            tokens=int(steps.member_tokens[m]), mates=sorted(set(mates.tolist())),
            preempted=j in preempted,
        ))  # fmt: skip
    return out


def step_table(steps: EngineSteps) -> pa.Table:
    """One row per engine step: number, times, phase times, tokens and member counts."""
    preempts = np.bincount(steps.preempt_step[steps.preempt_step >= 0], minlength=steps.n)
    members: list[list[str]] = [[] for _ in range(steps.n)]
    for j, rid in zip(steps.member_step.tolist(), steps.member_request.tolist(), strict=True):
        members[j].append(rid)
    cols: dict[str, pa.Array] = {
        "step": pa.array(steps.number, type=pa.int32()),
        "start_us": pa.array(steps.start, type=pa.float64()),
        "end_us": pa.array(steps.end, type=pa.float64()),
        "dur_us": pa.array(steps.end - steps.start, type=pa.float64()),
    }
    for col in PHASE_COLUMNS:
        cols[col] = pa.array(steps.phase[col], type=pa.float64())
    cols["prefill_tokens"] = pa.array(steps.prefill_tokens, type=pa.int64())
    cols["n_prefill"] = pa.array(steps.n_prefill, type=pa.int32())
    cols["n_decode"] = pa.array(steps.n_decode, type=pa.int32())
    cols["preemptions"] = pa.array(preempts, type=pa.int32())
    cols["members"] = pa.array(members, type=pa.list_(pa.string()))
    return pa.table(cols)
