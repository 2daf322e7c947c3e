"""Per-op cost model, vectorized over every op of every request of a run (DESIGN §5).

An op is *modelled* when it carries flops or bytes; otherwise its observed time is used as is.
For a modelled op, in microseconds:

  compute c: matrix-unit ops (tiled, or >= `matrix_min_flops_per_output` flops per output
      element) run at the bf16 peak, others and mapping fallbacks at the vector rate. Tiled ops
      pay tile quantization (ceil(M/tm) * ceil(N/tn) tiles of tm*tn outputs, padding included)
      and wave quantization (tiles run in waves of core_count * occupancy slots, occupancy =
      tiles whose staging buffers fit a core's SRAM, capped by the profile).
  memory m: bytes at the bandwidth of their tier (sram / hbm / host link; unknown = hbm) plus
      spill traffic at HBM bandwidth: a fused group (ops of one request sharing a fusion group)
      whose working set (sum of its ops' bytes) exceeds the on-chip capacity spills the excess
      (written and read back), charged to its ops in proportion to their bytes.
  t = c + m - rho * min(c, m)  (partial overlap), plus one launch overhead per fused group
      (charged to its first modelled op) or per unfused op.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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


def _positive(x: F64) -> F64:
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


def _tier_us_per_byte(hw: HardwareProfile, p: CostParams) -> F64:
    """Microseconds per byte by tier code read as uint8 (256 entries): sram, hbm, host at their
    codes; every other code (-1 unknown, codes past MEM_TIERS) reads HBM."""
    per_byte = np.full(256, _US / (hw.hbm_bw * p.memory_efficiency))
    per_byte[[MEM_TIER_CODE["sram"], MEM_TIER_CODE["hbm"], MEM_TIER_CODE["host"]]] = [
        _US / (bw * p.memory_efficiency) for bw in (hw.sram_bw, hw.hbm_bw, hw.host_link_bw)
    ]
    return per_byte


def _tier_index(tier: NDArray[np.integer]) -> NDArray[np.intp]:
    """Index of each tier code into _tier_us_per_byte's table (an int8 code read as uint8).

    Converted to intp up front: take() with narrow indices is several times slower."""
    if tier.dtype == np.int8:
        return tier.view(np.uint8).astype(np.intp)
    return np.where((tier < 0) | (tier > 255), 255, tier).astype(np.intp)


def _in_range(x: F64) -> B:
    """0 < x < inf (False for NaN)."""
    ok = np.greater(x, 0.0)
    ok &= x < np.inf
    return ok


def _us_per_flop(hw: HardwareProfile, p: CostParams) -> tuple[float, float]:
    """Microseconds per flop on the (vector unit, matrix unit) at reachable efficiency."""
    vec_us = _US / (hw.vector_flops * p.compute_efficiency)
    return vec_us, _US / (hw.peak_dense_bf16_flops * p.compute_efficiency)


def _matrix_candidates(m: F64, n: F64, mod: B, fallback: B) -> B:
    """Ops that may run on the matrix unit: modelled, known output shape, not a generic
    fallback kernel."""
    cand = _in_range(m)
    cand &= _in_range(n)
    cand &= mod
    cand &= ~fallback
    return cand


def _tiled_us(
    vec_us: F64,
    m: F64,
    n: F64,
    tm: F64 | float,
    tn: F64 | float,
    hw: HardwareProfile,
    p: CostParams,
) -> F64:
    """Compute time of tiled ops from their vector-unit time; tm, tn: per op or one tile for all."""
    return _on_matrix(vec_us, _issued(m, n, tm, tn, hw, p), hw, p)


def _issued(
    m: F64, n: F64, tm: F64 | float, tn: F64 | float, hw: HardwareProfile, p: CostParams
) -> F64:
    """Work actually issued over work needed: every slot of every wave runs a full tile."""
    _, t_waves, slots = _quantize(m, n, tm, tn, hw, p)
    return np.asarray(t_waves * slots * tm * tn / (m * n), dtype=np.float64)


def _on_matrix(vec_us: F64, issued: F64, hw: HardwareProfile, p: CostParams) -> F64:
    """Compute time on the matrix unit of ops with this vector-unit time and issued work."""
    vec, mat = _us_per_flop(hw, p)
    on_matrix_factor = 1.0 + (mat / vec - 1.0)
    return np.asarray(vec_us * (on_matrix_factor * issued), dtype=np.float64)


def _overlapped(
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


def _fused_us(compute: F64, memory: F64, launch: NDArray[np.floating[Any]], p: CostParams) -> F64:
    """Time of fused ops, from their group's memory (spill included) and launch share."""
    return np.asarray(compute + memory - p.overlap * np.minimum(compute, memory) + launch)


def _local_costs(
    ops: OpArrays, sl: slice, hw: HardwareProfile, p: CostParams, out: OpCost, per_byte: F64
) -> F64:
    """Everything that depends on the op alone, for one chunk; fused groups are fixed up after.

    per_byte = _tier_us_per_byte(hw, p). Returns the chunk's bytes (NaN, inf, < 0 as 0)."""
    f = _positive(ops.flops[sl])
    b = _positive(ops.bytes[sl])
    mod = out.modelled[sl]  # unmodelled ops keep f = b = 0, hence zero compute and memory
    np.greater(f, 0.0, out=mod)
    mod |= b > 0
    out.launched[sl] = mod

    vec_us, mat_us = _us_per_flop(hw, p)
    compute = out.compute_us[sl]
    np.multiply(f, vec_us, out=compute)
    # Tiled candidates always go to the matrix unit, the others when dense enough; masks over
    # the whole chunk are cheaper than gathering the (usually many) candidates.
    m, nn = ops.m[sl], ops.n[sl]
    cand = _matrix_candidates(m, nn, mod, ops.fallback[sl])
    tile_ok = _in_range(ops.tile_m[sl])
    tile_ok &= _in_range(ops.tile_n[sl])
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
    compute[tiled] = _tiled_us(
        compute[tiled], m[tiled], nn[tiled], ops.tile_m[sl][tiled], ops.tile_n[sl][tiled], hw, p
    )

    memory = out.memory_us[sl]
    np.multiply(b, per_byte.take(_tier_index(ops.mem_tier[sl])), out=memory)
    _overlapped(compute, memory, mod, ops.observed_us[sl], hw, p, out.predicted_us[sl])
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
    over = np.flatnonzero(excess[key] > 0)  # working > capacity >= 0: no division by zero
    if over.size:
        k_over = key[over]
        spill = excess[k_over] * p.spill_factor * bf[over] / working[k_over]
        out.spill_bytes[fused[over]] = spill
        m[over] += spill * (_US / (hw.hbm_bw * p.memory_efficiency))
        out.memory_us[fused[over]] = m[over]
    # One launch per group instance, on its first modelled op in array order.
    first = first_index(key, n_keys)
    launched = np.zeros(fused.size, dtype=np.bool_)
    launched[first[first < fused.size]] = True
    out.launched[fused] = launched
    out.predicted_us[fused] = _fused_us(c, m, launched * hw.launch_overhead_us, p)


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
    per_byte = _tier_us_per_byte(hw, params)
    fused = _Fused([], [], [], [])
    for sl in chunks(n):
        out.spill_bytes[sl] = 0.0  # chunk by chunk, while the chunk's lines are being written
        fused.add(ops, sl, out, _local_costs(ops, sl, hw, params, out, per_byte))
    _group_costs(hw, params, out, fused)
    return out


def retimed(
    ops: OpArrays,
    base: OpCost,
    sel: I64,
    hw: HardwareProfile,
    params: CostParams = DEFAULT_PARAMS,
    *,
    tiles: Sequence[tuple[float, float]] = (),
    fallback: bool | None = None,
    fastest: bool = False,
) -> Iterator[F64]:
    """op_times(...).predicted_us[sel] had ops `sel` run with each tile of `tiles` (one array
    per tile, each made when asked for), or with fallback flag `fallback` when no tiles are
    given; base = op_times(ops, hw, params). `fastest`: one array, each op on its fastest
    tile of `tiles` (the least of the arrays, without making each).

    Only compute time depends on the tile and the fallback flag (memory, spill and launches
    depend on bytes, tiers and groups), so only `sel` is re-costed: O(len(sel)), not O(ops).
    """
    n = int(sel.size)
    # Only the fields _local_costs reads are gathered; the others are placeholders. With tiles,
    # `sel` is costed once untiled: a tile only changes its matrix candidates (below).
    zeros = np.broadcast_to(np.zeros(1), (n,))
    no_tile = np.broadcast_to(np.full(1, np.nan), (n,))
    sub = OpArrays(
        req=np.broadcast_to(np.zeros(1, dtype=np.int64), (n,)),
        stage=np.broadcast_to(np.zeros(1, dtype=np.int8), (n,)),
        observed_us=ops.observed_us[sel],
        flops=ops.flops[sel],
        bytes=ops.bytes[sel],
        m=ops.m[sel],
        n=ops.n[sel],
        tile_m=no_tile if tiles else ops.tile_m[sel],
        tile_n=no_tile if tiles else ops.tile_n[sel],
        fusion_group=np.broadcast_to(np.full(1, -1, dtype=np.int64), (n,)),
        mem_tier=ops.mem_tier[sel],
        core=np.broadcast_to(np.zeros(1, dtype=np.int32), (n,)),
        fallback=ops.fallback[sel] if fallback is None else np.full(n, fallback, dtype=np.bool_),
        recompile=np.broadcast_to(np.zeros(1, dtype=np.bool_), (n,)),
        predicted_us=zeros,
    )
    out = OpCost(
        predicted_us=np.empty(n),
        modelled=np.empty(n, dtype=np.bool_),
        compute_us=np.empty(n),
        memory_us=np.empty(n),
        spill_bytes=zeros,
        launched=np.empty(n, dtype=np.bool_),
        launch_overhead_us=hw.launch_overhead_us,
        matrix_unit=np.empty(n, dtype=np.bool_),
    )
    per_byte = _tier_us_per_byte(hw, params)
    for sl in chunks(n):
        _local_costs(sub, sl, hw, params, out, per_byte)
    # Same arithmetic, in the same order, as op_times: _group_costs' formula for fused ops
    # with base's memory (spill included) and launch, _local_costs' result for the others.
    fused = np.flatnonzero(base.modelled[sel] & (ops.fusion_group[sel] >= 0))
    fused_ops = sel[fused]
    fused_mem = base.memory_us[fused_ops]
    fused_launch = base.launched[fused_ops] * hw.launch_overhead_us
    out.predicted_us[fused] = _fused_us(out.compute_us[fused], fused_mem, fused_launch, params)
    if not tiles:
        yield out.predicted_us
        return
    # A tile every op can use sends all matrix candidates to the matrix unit, tiled, where
    # _local_costs leaves their vector-unit time as is (factor 1); any other tile leaves every
    # op untiled. The other ops cost the same either way: only the candidates are re-costed.
    cand = _matrix_candidates(sub.m, sub.n, out.modelled, sub.fallback)
    in_group = np.flatnonzero(cand[fused])
    cand[fused] = False
    solo = np.flatnonzero(cand)
    vec_us = _us_per_flop(hw, params)[0]
    parts = [
        _Candidates(
            fused[in_group], vec_us, sub, fused_mem[in_group], fused_launch[in_group], True
        ),
        _Candidates(solo, vec_us, sub, out.memory_us[solo], sub.observed_us[solo], False),
    ]
    if fastest:
        usable = [t for t in tiles if _in_range(np.array(t, dtype=np.float64)).all()]
        best = out.predicted_us.copy()
        if usable:
            for part in parts:
                for at, t in part.fastest(usable, hw, params):
                    # A tile out of range leaves the ops untiled: that time is on the menu too.
                    best[at] = t if len(usable) == len(tiles) else np.minimum(best[at], t)
        yield best
        return
    for tm, tn in tiles:
        alt = out.predicted_us.copy()
        if _in_range(np.array((tm, tn), dtype=np.float64)).all():
            for part in parts:
                for at, t in part.tiled(tm, tn, hw, params):
                    alt[at] = t
        yield alt


class _Candidates:
    """Matrix candidates among re-costed ops (positions `at` in them) with the tile-independent
    parts of their time: for fused ops their group's memory and launch share (as _group_costs
    takes them), for the others their memory and observed time (as _local_costs)."""

    def __init__(
        self,
        at: NDArray[np.intp],
        vec_us: float,
        sub: OpArrays,
        memory_us: F64,
        extra_us: NDArray[np.floating[Any]],
        fused: bool,
    ) -> None:
        self.at, self.memory_us, self.extra_us, self.fused = at, memory_us, extra_us, fused
        self.vec_us = _positive(sub.flops[at]) * vec_us
        self.m, self.n = sub.m[at], sub.n[at]

    def tiled(
        self, tm: float, tn: float, hw: HardwareProfile, p: CostParams
    ) -> Iterator[tuple[NDArray[np.intp], F64]]:
        """(positions, predicted time) chunk by chunk, with every candidate on a tm x tn tile."""
        for sl in chunks(self.at.size):
            c = _tiled_us(self.vec_us[sl], self.m[sl], self.n[sl], tm, tn, hw, p)
            yield self.at[sl], self._time(sl, c, hw, p)

    def fastest(
        self, tiles: Sequence[tuple[float, float]], hw: HardwareProfile, p: CostParams
    ) -> Iterator[tuple[NDArray[np.intp], F64]]:
        """As tiled, on each candidate's fastest tile of `tiles` (all in range): the time
        grows with compute, and compute with the issued work, so that tile has the least."""
        for sl in chunks(self.at.size):
            m, n = self.m[sl], self.n[sl]
            issued = _issued(m, n, *tiles[0], hw, p)
            for tm, tn in tiles[1:]:
                np.minimum(issued, _issued(m, n, tm, tn, hw, p), out=issued)
            yield self.at[sl], self._time(sl, _on_matrix(self.vec_us[sl], issued, hw, p), hw, p)

    def _time(self, sl: slice, c: F64, hw: HardwareProfile, p: CostParams) -> F64:
        if self.fused:
            return _fused_us(c, self.memory_us[sl], self.extra_us[sl], p)
        t = np.empty(c.size)
        mod = np.ones(c.size, dtype=np.bool_)  # candidates are modelled
        _overlapped(c, self.memory_us[sl], mod, self.extra_us[sl], hw, p, t)
        return t
