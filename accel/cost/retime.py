"""Re-costing a subset of ops with another tile or fallback flag, without re-costing the run:
only compute time depends on them, so only the chosen ops are costed again."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from accel.cost.model import (
    DEFAULT_PARAMS,
    CostParams,
    OpCost,
    _tier_index,
    fused_us,
    in_range,
    issued_share,
    local_costs,
    matrix_candidates,
    on_matrix,
    overlapped,
    positive,
    tier_us_per_byte,
    tiled_us,
    us_per_flop,
)
from accel.grouping import chunks
from accel.ops import F64, I64, OpArrays
from accel.profiles import HardwareProfile

# Ops a caller re-costs per retimed call over millions of ops: its temporaries for all of a
# 5M-op run's kernels would take 0.45 GB on top of the run (each op is costed on its own, so
# parts give the same result).
RETIMED_PART: Final[int] = 1 << 18


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
    if fastest and tiles and all(in_range(np.array(t, dtype=np.float64)).all() for t in tiles):
        yield _on_fastest_tile(ops, base, sel, hw, params, tiles)
        return
    if fallback is True and not tiles:
        yield _on_generic_kernel(ops, base, sel, hw, params)
        return
    n = int(sel.size)
    # Only the fields local_costs reads are gathered; the others are placeholders. With tiles,
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
    per_byte = tier_us_per_byte(hw, params)
    for sl in chunks(n):
        local_costs(sub, sl, hw, params, out, per_byte)
    # Same arithmetic, in the same order, as op_times: _group_costs' formula for fused ops
    # with base's memory (spill included) and launch, local_costs' result for the others.
    fused = np.flatnonzero(base.modelled[sel] & (ops.fusion_group[sel] >= 0))
    fused_ops = sel[fused]
    fused_mem = base.memory_us[fused_ops]
    fused_launch = base.launched[fused_ops] * hw.launch_overhead_us
    out.predicted_us[fused] = fused_us(out.compute_us[fused], fused_mem, fused_launch, params)
    if not tiles:
        yield out.predicted_us
        return
    # A tile every op can use sends all matrix candidates to the matrix unit, tiled, where
    # local_costs leaves their vector-unit time as is (factor 1); any other tile leaves every
    # op untiled. The other ops cost the same either way: only the candidates are re-costed.
    cand = matrix_candidates(sub.m, sub.n, out.modelled, sub.fallback)
    in_group = np.flatnonzero(cand[fused])
    cand[fused] = False
    solo = np.flatnonzero(cand)
    vec_us = us_per_flop(hw, params)[0]
    parts = [
        _Candidates(
            fused[in_group], vec_us, sub, fused_mem[in_group], fused_launch[in_group], True
        ),
        _Candidates(solo, vec_us, sub, out.memory_us[solo], sub.observed_us[solo], False),
    ]
    # Here `fastest` has a tile out of range (with every tile in range: _on_fastest_tile).
    if fastest:
        usable = [t for t in tiles if in_range(np.array(t, dtype=np.float64)).all()]
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
        if in_range(np.array((tm, tn), dtype=np.float64)).all():
            for part in parts:
                for at, t in part.tiled(tm, tn, hw, params):
                    alt[at] = t
        yield alt


def _on_fastest_tile(
    ops: OpArrays,
    base: OpCost,
    sel: I64,
    hw: HardwareProfile,
    params: CostParams,
    tiles: Sequence[tuple[float, float]],
) -> F64:
    """retimed(..., tiles=tiles, fastest=True) when every tile is in range: each matrix
    candidate then runs on its fastest tile, so only the others are costed untiled (the
    candidates' untiled time and fused fix-up would be thrown away: a third of the work)."""
    f, b = positive(ops.flops[sel]), positive(ops.bytes[sel])
    m, n = ops.m[sel], ops.n[sel]
    mod = f > 0  # as local_costs marks modelled ops
    mod |= b > 0
    cand = matrix_candidates(m, n, mod, ops.fallback[sel])
    best = np.empty(sel.size)
    rest = np.flatnonzero(~cand)
    if rest.size:  # no candidate among them: the first tile leaves them all untiled
        best[rest] = next(retimed(ops, base, sel[rest], hw, params, tiles=tiles))
    at, sel_at, f, b, m, n = _where(cand, np.arange(sel.size), sel, f, b, m, n)
    in_group = base.modelled[sel_at] & (ops.fusion_group[sel_at] >= 0)
    g_at, g_sel, g_f, g_m, g_n = _where(in_group, at, sel_at, f, m, n)
    s_at, s_sel, s_f, s_b, s_m, s_n = _where(~in_group, at, sel_at, f, b, m, n)
    per_byte = tier_us_per_byte(hw, params).take(_tier_index(ops.mem_tier[s_sel]))
    vec_us = us_per_flop(hw, params)[0]
    parts = [
        _Candidates(
            g_at,
            vec_us,
            (g_f, g_m, g_n),
            base.memory_us[g_sel],
            base.launched[g_sel] * hw.launch_overhead_us,
            True,
        ),
        _Candidates(s_at, vec_us, (s_f, s_m, s_n), s_b * per_byte, ops.observed_us[s_sel], False),
    ]
    for part in parts:
        for pos, t in part.fastest(tiles, hw, params):
            best[pos] = t
    return best


def _on_generic_kernel(
    ops: OpArrays, base: OpCost, sel: I64, hw: HardwareProfile, params: CostParams
) -> F64:
    """retimed(..., fallback=True) without tiles: a generic kernel is no matrix candidate, so
    its compute is its flops' vector-unit time (local_costs' factor is exactly 1) and every
    other part is base's: memory (spill included for fused ops), launch, modelled. The same
    arithmetic as local_costs and _group_costs, without gathering shapes, tiles and tiers."""
    out = np.empty(sel.size)
    vec_us = us_per_flop(hw, params)[0]
    for sl in chunks(sel.size):
        at = sel[sl]
        compute = positive(ops.flops[at]) * vec_us
        memory, mod = base.memory_us[at], base.modelled[at]
        t = out[sl]
        overlapped(compute, memory, mod, ops.observed_us[at], hw, params, t)
        fused = np.flatnonzero(mod & (ops.fusion_group[at] >= 0))
        if fused.size:
            launch = base.launched[at[fused]] * hw.launch_overhead_us
            t[fused] = fused_us(compute[fused], memory[fused], launch, params)
    return out


def _where(mask: NDArray[np.bool_], *arrays: NDArray[Any]) -> list[NDArray[Any]]:
    """The arrays at mask's True positions; the arrays themselves when it holds everywhere (the
    usual case: no gathers)."""
    return list(arrays) if mask.all() else [a[mask] for a in arrays]


class _Candidates:
    """Matrix candidates among re-costed ops (positions `at` in them) with the tile-independent
    parts of their time: for fused ops their group's memory and launch share (as _group_costs
    takes them), for the others their memory and observed time (as local_costs)."""

    def __init__(
        self,
        at: NDArray[np.intp],
        vec_us: float,
        sub: OpArrays | tuple[F64, F64, F64],
        memory_us: F64,
        extra_us: NDArray[np.floating[Any]],
        fused: bool,
    ) -> None:
        """sub: the re-costed ops, or their (flops, m, n) already taken at `at`."""
        self.at, self.memory_us, self.extra_us, self.fused = at, memory_us, extra_us, fused
        flops, self.m, self.n = (
            sub if isinstance(sub, tuple) else (sub.flops[at], sub.m[at], sub.n[at])
        )
        self.vec_us = positive(flops) * vec_us

    def tiled(
        self, tm: float, tn: float, hw: HardwareProfile, p: CostParams
    ) -> Iterator[tuple[NDArray[np.intp], F64]]:
        """(positions, predicted time) chunk by chunk, with every candidate on a tm x tn tile."""
        for sl in chunks(self.at.size):
            c = tiled_us(self.vec_us[sl], self.m[sl], self.n[sl], tm, tn, hw, p)
            yield self.at[sl], self._time(sl, c, hw, p)

    def fastest(
        self, tiles: Sequence[tuple[float, float]], hw: HardwareProfile, p: CostParams
    ) -> Iterator[tuple[NDArray[np.intp], F64]]:
        """As tiled, on each candidate's fastest tile of `tiles` (all in range): the time
        grows with compute, and compute with the issued work, so that tile has the least."""
        for sl in chunks(self.at.size):
            m, n = self.m[sl], self.n[sl]
            issued = issued_share(m, n, *tiles[0], hw, p)
            for tm, tn in tiles[1:]:
                np.minimum(issued, issued_share(m, n, tm, tn, hw, p), out=issued)
            yield self.at[sl], self._time(sl, on_matrix(self.vec_us[sl], issued, hw, p), hw, p)

    def _time(self, sl: slice, c: F64, hw: HardwareProfile, p: CostParams) -> F64:
        if self.fused:
            return fused_us(c, self.memory_us[sl], self.extra_us[sl], p)
        t = np.empty(c.size)
        mod = np.ones(c.size, dtype=np.bool_)  # candidates are modelled
        overlapped(c, self.memory_us[sl], mod, self.extra_us[sl], hw, p, t)
        return t
