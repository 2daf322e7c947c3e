"""Structure-of-arrays inputs of the model: every op of every request of one run at once.

This is the contract between the store (which fills it from events/requests) and accel/.
Unknown numeric values are NaN, unknown codes are -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
B = NDArray[np.bool_]


@dataclass(frozen=True)
class OpArrays:
    """One entry per attributed trace event (op) of a run."""

    req: I64  # request index into RequestArrays, 0..n_requests-1
    stage: I8  # accel.stages.STAGE_CODE
    observed_us: F64  # observed exclusive duration
    flops: F64
    bytes: F64
    m: F64  # output rows / cols of the op, for tile quantization (from `shape`)
    n: F64
    tile_m: F64
    tile_n: F64
    fusion_group: I64  # -1: not fused
    mem_tier: I8  # accel.stages.MEM_TIER_CODE, -1 unknown
    core: I32  # -1 unknown
    fallback: B
    recompile: B
    predicted_us: F64  # the compiler's own estimate, NaN when absent
    kernel: list[str] = field(default_factory=list)  # kernel name per op ('' unknown)
    # logical op name per op (the event name, '' unknown): matches an op across runs
    name: list[str] = field(default_factory=list)
    # `name` dictionary-encoded (code per op into name_vocab), when the loader has it: grouping
    # ops by name then never touches millions of Python strings. Empty: derived from `name`.
    name_code: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    name_vocab: tuple[str, ...] = ()
    # True when name_vocab is sorted and every entry of it occurs in name_code (sorted_used
    # makes it so): name_codes then takes the codes as they are, ~30 ms less per call on 5M ops.
    name_vocab_used: bool = False
    # `kernel` the same way (the store loader fills both; it may leave the lists empty).
    kernel_code: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    kernel_vocab: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return int(self.req.shape[0])


def nan_as_zero(values: F64, *, own: bool = False) -> F64:
    """np.nan_to_num(values, nan=0.0) exactly (NaN 0, infinities the largest finite values),
    without its five passes when one sum shows nothing to replace. `own`: values is the
    caller's own temporary (or is only read), handed back itself when clean."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, or a sum past the range
        clean = bool(np.isfinite(values.sum()))
    if clean:
        return values if own else values.copy()
    return np.nan_to_num(values, nan=0.0)


def sorted_used(codes: NDArray[np.integer], vocab: Sequence[str]) -> tuple[I32, tuple[str, ...]]:
    """(codes, vocabulary) renumbered to the sorted entries of `vocab` that occur in `codes`;
    the codes array itself (as int32) when that changes no code."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(vocab)))
    present = sorted({vocab[i] for i in used.tolist()})
    k = used.size
    if (k == 0 or int(used[-1]) == k - 1) and present == list(vocab[:k]):
        # Codes 0..k-1 in use, for k names in sorted order (a store's vocabulary: sorted names,
        # then '' for ops without one, often unused): nothing to renumber, no copy.
        return codes.astype(np.int32, copy=False), tuple(present)
    index = {name: i for i, name in enumerate(present)}
    remap = np.array([index.get(name, -1) for name in vocab], dtype=np.int32)
    return remap[codes], tuple(present)


def name_codes(ops: OpArrays, *, kernel_fallback: bool = False) -> tuple[I64, list[str]]:
    """(code per op, sorted vocabulary of the names present) of ops.name; kernel names stand in
    for missing names when kernel_fallback, else every op is named ''."""
    if ops.name_code.shape[0] == ops.size and (ops.name_vocab or ops.name_vocab_used):
        if ops.name_vocab_used:
            return ops.name_code.astype(np.int64), list(ops.name_vocab)
        codes: NDArray[np.integer] = ops.name_code
        vocab = list(ops.name_vocab)
    else:
        names = ops.name
        if len(names) != ops.size:
            names = ops.kernel if kernel_fallback and len(ops.kernel) == ops.size else []
        if not names:
            return np.zeros(ops.size, dtype=np.int64), [""] if ops.size else []
        seen: dict[str, int] = {}
        codes = np.fromiter((seen.setdefault(s, len(seen)) for s in names), np.int64, ops.size)
        vocab = list(seen)
    # Renumbered to the sorted names that occur: codes then do not depend on where they came from.
    renumbered, present = sorted_used(codes, vocab)
    return renumbered.astype(np.int64), list(present)


def joint_name_codes(
    a: OpArrays, b: OpArrays, *, kernel_fallback: bool = False
) -> tuple[I64, I64, list[str]]:
    """name_codes of two runs over one sorted vocabulary (the names of either)."""
    ca, va = name_codes(a, kernel_fallback=kernel_fallback)
    cb, vb = name_codes(b, kernel_fallback=kernel_fallback)
    vocab = sorted(set(va) | set(vb))
    index = {s: i for i, s in enumerate(vocab)}

    def joint(codes: I64, own: list[str]) -> I64:
        if own == vocab:  # the usual pair, with the same names: nothing to renumber
            return codes
        return np.array([index[s] for s in own], dtype=np.int64)[codes]

    return joint(ca, va), joint(cb, vb), vocab


@dataclass(frozen=True)
class RequestArrays:
    """One entry per request of a run; stage_us columns follow STAGES then `other`."""

    request_id: list[str]
    arrival_us: F64
    start_us: F64
    latency_us: F64
    stage_us: F64  # shape (n_requests, 6)
    batch_size: I32
    shape_key: list[str]  # DESIGN §4 shape_key, '' when unknown
    # Requests sharing a batch id (>= 0) are served together as one queue job; -1 or None: alone.
    batch_id: I64 | None = None

    @property
    def size(self) -> int:
        return int(self.arrival_us.shape[0])


@dataclass(frozen=True)
class RunArrays:
    run_id: str
    ops: OpArrays
    requests: RequestArrays
    # shape_keys compiled ahead of serving (from the compile log / warm-up); empty when unknown
    compiled_shapes: frozenset[str] = frozenset()
    # Per request: compiled regions entered, and operators run eagerly between compiled graphs
    # (graph-break evidence); None when the loader did not look.
    regions: I64 | None = None
    eager_between: I64 | None = None
