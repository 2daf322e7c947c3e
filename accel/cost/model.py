"""The cost model's formulas (see the package docstring): per-op compute, memory and launch,
fused groups and their spill, vectorized over every op of a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from accel.grouping import chunks, dense_ids, first_index
from accel.ops import F64, I64, B, OpArrays
from accel.profiles import HardwareProfile
from accel.stages import MEM_TIER_CODE

_US = 1e6


@dataclass(frozen=True)
class CostParams:
    """Tunable constants of the cost model (defaults are engineering estimates, not data)."""

    overlap: float = 0.8  # rho: share of min(compute, memory) hidden by overlap
    compute_efficiency: float = 0.75  # reachable share of peak FLOP/s on a full wave
    memory_efficiency: float = 0.85  # reachable share of peak bandwidth
    k_tile: float = 64.0  # reduction depth staged per tile (for the tile's SRAM footprint)
    elem_bytes: float = 2.0  # bf16 operands
    acc_bytes: float = 4.0  # fp32 accumulators
    spill_factor: float = 2.0  # spilled bytes are written out and read back
    onchip_share: float = 1.0  # share of SRAM + L2 a fused group may keep resident
    matrix_min_flops_per_output: float = 32.0  # untiled ops this dense go to the matrix unit


DEFAULT_PARAMS = CostParams()


@dataclass(frozen=True)
class OpCost:
    """Model output per op (same order as the OpArrays); times in microseconds."""

    predicted_us: F64  # modelled time, or the observed time (NaN -> 0) where not modelled
    modelled: B
    compute_us: F64  # 0 where not modelled
    memory_us: F64  # tier traffic + spill traffic, 0 where not modelled
    spill_bytes: F64
    launched: B  # pays a launch: a modelled unfused op, or a fused group's first modelled op
    launch_overhead_us: float
    matrix_unit: B  # ran on the matrix unit (vs vector unit)

    @property
    def launch_us(self) -> F64:
        """Launch overhead charged to each op (0 where not launched)."""
        return np.asarray(self.launched * self.launch_overhead_us, dtype=np.float64)

    @property
    def memory_bound(self) -> B:
        """Modelled ops whose memory time exceeds their compute time."""
        return np.asarray(self.modelled & (self.memory_us > self.compute_us), dtype=np.bool_)


def positive(x: F64) -> F64:
    """x where finite and > 0, else 0 (fmax maps NaN and negatives to 0 in one pass)."""
    out = np.fmax(x, 0.0)
    if out.size and out.max() == np.inf:
        out[np.isinf(out)] = 0.0
    return out


def _group_key(req: I64, fg: I64) -> tuple[I64, int]:
    """A key per fused op (its request and fusion group), equal exactly for ops of one
    instance, in 0..k-1 with k small enough to index a table (at most ~4 keys per op)."""
    width = int(fg.max()) + 1
    if width * (int(req.max()) + 1) < 2**62:
        key = req * width + fg
        lo, hi = int(key.min()), int(key.max())
        if hi - lo <= 4 * key.size + 1024:
            return key - lo, hi - lo + 1
        return dense_ids(key)
    # Ids too wide to pack into one int64 key.
    _, inv = np.unique(np.stack((req, fg), axis=1), axis=0, return_inverse=True)
    inv = inv.ravel().astype(np.int64)
    return inv, int(inv.max()) + 1


def group_instance(ops: OpArrays) -> I64:
    """Dense id of each op's fused-group instance (request, fusion group); -1 when unfused."""
    fused = np.flatnonzero(ops.fusion_group >= 0)
    out = np.full(ops.size, -1, dtype=np.int64)
    if fused.size:
        out[fused] = dense_ids(_group_key(ops.req[fused], ops.fusion_group[fused])[0])[0]
    return out


def _quantize(
    m: F64, n: F64, tm: F64 | float, tn: F64 | float, hw: HardwareProfile, p: CostParams
) -> tuple[F64, F64, F64]:
    """(tiles, waves, slots per wave) of tiled ops: ceil(M/tm) * ceil(N/tn) tiles run in waves
    of core_count * occupancy, occupancy = tiles whose staging buffers fit a core's SRAM."""
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    footprint = (tm + tn) * (p.k_tile * p.elem_bytes) + tm * tn * p.acc_bytes
    occupancy = np.clip(np.floor(hw.sram_per_core_bytes / footprint), 1, hw.max_tiles_per_core)
    slots = hw.core_count * occupancy
    return tiles, np.ceil(tiles / slots), slots


@dataclass(frozen=True)
class TilePlan:
    """Tile and wave counts per op; NaN where the op is not tiled (no tile, shape or fallback)."""

    tiles: F64
    waves: F64
    wave_efficiency: F64  # tiles / (waves * slots): share of the last-wave-padded slots used


def tile_plan(ops: OpArrays, hw: HardwareProfile, params: CostParams = DEFAULT_PARAMS) -> TilePlan:
    """The tile/wave quantization op_times applies, for showing why a tile choice costs time."""
    ok = (
        ~ops.fallback
        & (ops.m > 0)
        & (ops.n > 0)
        & (ops.m < np.inf)
        & (ops.n < np.inf)
        & (ops.tile_m > 0)
        & (ops.tile_n > 0)
        & (ops.tile_m < np.inf)
        & (ops.tile_n < np.inf)
    )
    idx = np.flatnonzero(ok)
    tiles, waves, slots = _quantize(
        ops.m[idx], ops.n[idx], ops.tile_m[idx], ops.tile_n[idx], hw, params
    )
    out = np.full((3, ops.size), np.nan)
    out[0, idx], out[1, idx], out[2, idx] = tiles, waves, tiles / (waves * slots)
    return TilePlan(tiles=out[0], waves=out[1], wave_efficiency=out[2])


def tier_us_per_byte(hw: HardwareProfile, p: CostParams) -> F64:
    """Microseconds per byte by tier code read as uint8 (256 entries): sram, hbm, host at their
    codes; every other code (-1 unknown, codes past MEM_TIERS) reads HBM."""
    per_byte = np.full(256, _US / (hw.hbm_bw * p.memory_efficiency))
    per_byte[[MEM_TIER_CODE["sram"], MEM_TIER_CODE["hbm"], MEM_TIER_CODE["host"]]] = [
        _US / (bw * p.memory_efficiency) for bw in (hw.sram_bw, hw.hbm_bw, hw.host_link_bw)
    ]
    return per_byte


def _tier_index(tier: NDArray[np.integer]) -> NDArray[np.intp]:
    """Index of each tier code into tier_us_per_byte's table (an int8 code read as uint8).

    Converted to intp up front: take() with narrow indices is several times slower."""
    if tier.dtype == np.int8:
        return tier.view(np.uint8).astype(np.intp)
    return np.where((tier < 0) | (tier > 255), 255, tier).astype(np.intp)


def in_range(x: F64) -> B:
    """0 < x < inf (False for NaN)."""
    ok = np.greater(x, 0.0)
    ok &= x < np.inf
    return ok


def us_per_flop(hw: HardwareProfile, p: CostParams) -> tuple[float, float]:
    """Microseconds per flop on the (vector unit, matrix unit) at reachable efficiency."""
    vec_us = _US / (hw.vector_flops * p.compute_efficiency)
    return vec_us, _US / (hw.peak_dense_bf16_flops * p.compute_efficiency)


def matrix_candidates(m: F64, n: F64, mod: B, fallback: B) -> B:
    """Ops that may run on the matrix unit: modelled, known output shape, not a generic
    fallback kernel."""
    cand = in_range(m)
    cand &= in_range(n)
    cand &= mod
    cand &= ~fallback
    return cand


def tiled_us(
    vec_us: F64,
    m: F64,
    n: F64,
    tm: F64 | float,
    tn: F64 | float,
    hw: HardwareProfile,
    p: CostParams,
) -> F64:
    """Compute time of tiled ops from their vector-unit time; tm, tn: per op or one tile for all."""
    return on_matrix(vec_us, issued_share(m, n, tm, tn, hw, p), hw, p)


def issued_share(
    m: F64, n: F64, tm: F64 | float, tn: F64 | float, hw: HardwareProfile, p: CostParams
) -> F64:
    """Work actually issued over work needed: every slot of every wave runs a full tile."""
    tm, tn = _one_tile(tm), _one_tile(tn)
    _, t_waves, slots = _quantize(m, n, tm, tn, hw, p)
    return np.asarray(t_waves * slots * tm * tn / (m * n), dtype=np.float64)


def _one_tile(t: F64 | float) -> F64 | float:
    """A tile side given per op as the one value every op has, when they all have it (runs
    mostly use one tile): its footprint and occupancy are then worked out once, not per op,
    with the same float operations, so the same result."""
    if isinstance(t, np.ndarray) and t.size:
        lo = float(t.min())
        if lo > 0 and lo == float(t.max()):  # > 0: no NaN, no signed zeros
            return lo
    return t


def on_matrix(vec_us: F64, issued: F64, hw: HardwareProfile, p: CostParams) -> F64:
    """Compute time on the matrix unit of ops with this vector-unit time and issued work."""
    vec, mat = us_per_flop(hw, p)
    on_matrix_factor = 1.0 + (mat / vec - 1.0)
    return np.asarray(vec_us * (on_matrix_factor * issued), dtype=np.float64)


def overlapped(
    compute: F64,
    memory: F64,
    mod: B,
    observed: NDArray[np.floating[Any]],
    hw: HardwareProfile,
    p: CostParams,
    out: F64,
) -> None:
    """out = c + m - rho * min(c, m) + launch where modelled, else the observed time (NaN -> 0).

    Exactly 0 + observed for unmodelled ops, whose compute and memory are 0."""
    np.minimum(compute, memory, out=out)
    out *= -p.overlap
    out += compute
    out += memory
    out += mod * hw.launch_overhead_us
    if not np.isfinite(observed.sum()):  # a NaN or inf among them (or an overflowing sum)
        observed = np.nan_to_num(observed, nan=0.0)
    out += observed * ~mod


def fused_us(compute: F64, memory: F64, launch: NDArray[np.floating[Any]], p: CostParams) -> F64:
    """Time of fused ops, from their group's memory (spill included) and launch share."""
    return np.asarray(compute + memory - p.overlap * np.minimum(compute, memory) + launch)


def local_costs(
    ops: OpArrays, sl: slice, hw: HardwareProfile, p: CostParams, out: OpCost, per_byte: F64
) -> F64:
    """Everything that depends on the op alone, for one chunk; fused groups are fixed up after.

    per_byte = tier_us_per_byte(hw, p). Returns the chunk's bytes (NaN, inf, < 0 as 0)."""
    f = positive(ops.flops[sl])
    b = positive(ops.bytes[sl])
    mod = out.modelled[sl]  # unmodelled ops keep f = b = 0, hence zero compute and memory
    np.greater(f, 0.0, out=mod)
    mod |= b > 0
    out.launched[sl] = mod

    vec_us, mat_us = us_per_flop(hw, p)
    compute = out.compute_us[sl]
    np.multiply(f, vec_us, out=compute)
    # Tiled candidates always go to the matrix unit, the others when dense enough; masks over
    # the whole chunk are cheaper than gathering the (usually many) candidates.
    m, nn = ops.m[sl], ops.n[sl]
    cand = matrix_candidates(m, nn, mod, ops.fallback[sl])
    tile_ok = in_range(ops.tile_m[sl])
    tile_ok &= in_range(ops.tile_n[sl])
    matrix = out.matrix_unit[sl]
    np.greater_equal(f, p.matrix_min_flops_per_output * (m * nn), out=matrix)
    matrix &= ~tile_ok
    matrix &= cand  # untiled matrix-unit ops
    # factor = 1 + on_matrix * (ratio - 1): arithmetic on the mask beats a masked multiply,
    # which branches per element.
    factor = matrix * (mat_us / vec_us - 1.0)
    factor += 1.0
    compute *= factor
    cand &= tile_ok
    matrix |= cand
    tiled = np.flatnonzero(cand)
    compute[tiled] = tiled_us(
        compute[tiled], m[tiled], nn[tiled], ops.tile_m[sl][tiled], ops.tile_n[sl][tiled], hw, p
    )

    memory = out.memory_us[sl]
    np.multiply(b, per_byte.take(_tier_index(ops.mem_tier[sl])), out=memory)
    overlapped(compute, memory, mod, ops.observed_us[sl], hw, p, out.predicted_us[sl])
    return b


@dataclass
class _Fused:
    """Modelled fused ops gathered chunk by chunk, while their chunk is in cache."""

    index: list[NDArray[np.intp]]
    req: list[I64]
    group: list[I64]
    bytes: list[F64]

    def add(self, ops: OpArrays, sl: slice, out: OpCost, b: F64) -> None:
        group = ops.fusion_group[sl]
        idx = np.flatnonzero(out.modelled[sl] & (group >= 0))
        if idx.size:
            self.index.append(idx + sl.start)
            self.req.append(ops.req[sl][idx])
            self.group.append(group[idx])
            self.bytes.append(b[idx])


def _group_costs(hw: HardwareProfile, p: CostParams, out: OpCost, fused_ops: _Fused) -> None:
    """Spill traffic and launch sharing of fused group instances (they may span chunks)."""
    if not fused_ops.index:
        return
    # Each list is dropped once joined: on 5M ops they hold 70 MB, twice over while joined.
    fused = np.concatenate(fused_ops.index)
    fused_ops.index.clear()
    req, group = np.concatenate(fused_ops.req), np.concatenate(fused_ops.group)
    fused_ops.req.clear()
    fused_ops.group.clear()
    key, n_keys = _group_key(req, group)
    del req, group
    bf = np.concatenate(fused_ops.bytes)
    fused_ops.bytes.clear()
    working = np.bincount(key, weights=bf, minlength=n_keys)
    excess = np.maximum(working - hw.onchip_bytes * p.onchip_share, 0.0)
    c, m = out.compute_us[fused], out.memory_us[fused]
    spills = excess[key] > 0  # working > capacity >= 0: no division by zero
    if spills.all():  # every group spills: the arrays as they are, no gathers by `over`
        spill = excess[key] * p.spill_factor * bf / working[key]
        out.spill_bytes[fused] = spill
        m += spill * (_US / (hw.hbm_bw * p.memory_efficiency))
        out.memory_us[fused] = m
    elif spills.any():
        over = np.flatnonzero(spills)
        k_over, at = key[over], fused[over]
        spill = excess[k_over] * p.spill_factor * bf[over] / working[k_over]
        out.spill_bytes[at] = spill
        m[over] += spill * (_US / (hw.hbm_bw * p.memory_efficiency))
        out.memory_us[at] = m[over]
    # One launch per group instance, on its first modelled op in array order.
    first = first_index(key, n_keys)
    launched = np.zeros(fused.size, dtype=np.bool_)
    launched[first[first < fused.size]] = True
    out.launched[fused] = launched
    out.predicted_us[fused] = fused_us(c, m, launched * hw.launch_overhead_us, p)


def op_times(ops: OpArrays, hw: HardwareProfile, params: CostParams = DEFAULT_PARAMS) -> OpCost:
    """Predicted time of every op of a run on `hw` (see the module docstring for the model)."""
    n = ops.size
    # Two blocks rather than seven arrays: fewer, larger allocations that the allocator keeps
    # for the next call, where seven fresh 8 MB arrays page-fault on every run.
    times = np.empty((4, n))
    flags = np.empty((3, n), dtype=np.bool_)
    out = OpCost(
        predicted_us=times[0],
        modelled=flags[0],
        compute_us=times[1],
        memory_us=times[2],
        spill_bytes=times[3],
        launched=flags[1],
        launch_overhead_us=hw.launch_overhead_us,
        matrix_unit=flags[2],
    )
    per_byte = tier_us_per_byte(hw, params)
    fused = _Fused([], [], [], [])
    for sl in chunks(n):
        out.spill_bytes[sl] = 0.0  # chunk by chunk, while the chunk's lines are being written
        fused.add(ops, sl, out, local_costs(ops, sl, hw, params, out, per_byte))
    _group_costs(hw, params, out, fused)
    return out
