"""Plain-Python oracle of the accelerator model: one op, one request at a time.

Written from the model's definition (accel/cost.py, accel/replay.py docstrings), not from the
vectorized code, so that the tests compare two independent readings of the same model. Also the
baseline that bench/replay.py measures the vectorized replay against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accel.cost import CostParams
from accel.ops import RunArrays
from accel.profiles import HardwareProfile

N_STAGES = 5


@dataclass
class RefOp:
    predicted_us: float
    modelled: bool
    compute_us: float
    memory_us: float
    spill_bytes: float
    launch_us: float


def _num(x: float) -> float:
    """Finite positive value or 0."""
    return x if math.isfinite(x) and x > 0 else 0.0


def ref_op_times(run: RunArrays, hw: HardwareProfile, p: CostParams) -> list[RefOp]:
    ops = run.ops
    n = ops.size
    req = ops.req.tolist()
    fg = ops.fusion_group.tolist()
    flops = ops.flops.tolist()
    nbytes = ops.bytes.tolist()

    def is_modelled(i: int) -> bool:
        known = (math.isfinite(flops[i]) and flops[i] >= 0) or (
            math.isfinite(nbytes[i]) and nbytes[i] >= 0
        )
        return known and _num(flops[i]) + _num(nbytes[i]) > 0

    # Working set of every fused group instance, keyed by (request, fusion group).
    working: dict[tuple[int, int], float] = {}
    for i in range(n):
        if fg[i] >= 0:
            key = (req[i], fg[i])
            working[key] = working.get(key, 0.0) + _num(nbytes[i])
    launched: set[tuple[int, int]] = set()
    capacity = (hw.sram_per_core_bytes * hw.core_count + hw.l2_bytes) * p.onchip_share

    out: list[RefOp] = []
    for i in range(n):
        observed = float(ops.observed_us[i])
        if not is_modelled(i):
            out.append(RefOp(0.0 if math.isnan(observed) else observed, False, 0.0, 0.0, 0.0, 0.0))
            continue
        f, b = _num(flops[i]), _num(nbytes[i])
        m, nn = float(ops.m[i]), float(ops.n[i])
        tm, tn = float(ops.tile_m[i]), float(ops.tile_n[i])
        has_shape = math.isfinite(m) and math.isfinite(nn) and m > 0 and nn > 0
        has_tile = math.isfinite(tm) and math.isfinite(tn) and tm > 0 and tn > 0
        fallback = bool(ops.fallback[i])

        tiled = has_shape and has_tile and not fallback
        if fallback:
            on_matrix = False
        elif tiled:
            on_matrix = True
        else:
            on_matrix = has_shape and f >= p.matrix_min_flops_per_output * m * nn
        peak = hw.peak_dense_bf16_flops if on_matrix else hw.vector_flops
        if tiled:
            n_tiles = math.ceil(m / tm) * math.ceil(nn / tn)
            footprint = (tm + tn) * p.k_tile * p.elem_bytes + tm * tn * p.acc_bytes
            per_core = min(
                max(math.floor(hw.sram_per_core_bytes / footprint), 1), hw.max_tiles_per_core
            )
            slots = hw.core_count * per_core
            n_waves = math.ceil(n_tiles / slots)
            # Each wave occupies all slots for one tile's time; a tile's time is its padded work.
            tile_flops = f / (m * nn) * tm * tn
            compute = n_waves * slots * tile_flops / (peak * p.compute_efficiency) * 1e6
        else:
            compute = f / (peak * p.compute_efficiency) * 1e6

        tier = int(ops.mem_tier[i])
        if tier == 0:
            bw = hw.sram_bw
        elif tier == 2:
            bw = hw.host_link_bw
        else:
            bw = hw.hbm_bw
        spill = 0.0
        if fg[i] >= 0:
            ws = working[(req[i], fg[i])]
            if ws > capacity and ws > 0:
                spill = (ws - capacity) * p.spill_factor * (b / ws)
        memory = (
            b / (bw * p.memory_efficiency) * 1e6 + spill / (hw.hbm_bw * p.memory_efficiency) * 1e6
        )

        t = compute + memory - p.overlap * min(compute, memory)
        launch = 0.0
        if fg[i] < 0:
            launch = hw.launch_overhead_us
        elif (req[i], fg[i]) not in launched:
            launched.add((req[i], fg[i]))
            launch = hw.launch_overhead_us
        out.append(RefOp(t + launch, True, compute, memory, spill, launch))
    return out


def ref_stage_times(
    run: RunArrays, op_us: list[float], n_req: int
) -> tuple[list[list[float]], list[list[float]]]:
    """(stage time, barrier) per request and stage, by walking the ops."""
    serial = [[0.0] * N_STAGES for _ in range(n_req)]
    per_core: list[list[dict[int, float]]] = [[{} for _ in range(N_STAGES)] for _ in range(n_req)]
    for i in range(run.ops.size):
        r, s, c = int(run.ops.req[i]), int(run.ops.stage[i]), int(run.ops.core[i])
        if not (0 <= r < n_req and 0 <= s < N_STAGES):
            continue
        t = op_us[i]
        if c < 0:
            serial[r][s] += t
        else:
            per_core[r][s][c] = per_core[r][s].get(c, 0.0) + t
    stage = [[0.0] * N_STAGES for _ in range(n_req)]
    barrier = [[0.0] * N_STAGES for _ in range(n_req)]
    for r in range(n_req):
        for s in range(N_STAGES):
            busy = list(per_core[r][s].values())
            stage[r][s] = serial[r][s] + (max(busy) if busy else 0.0)
            if busy:
                barrier[r][s] = max(busy) - sum(busy) / len(busy)
    return stage, barrier


def ref_fifo_waits(arrival: list[float], service: list[float]) -> list[float]:
    """Lindley recursion as a loop, jobs taken in arrival order (stable)."""
    order = sorted(range(len(arrival)), key=lambda k: arrival[k])
    waits = [0.0] * len(arrival)
    prev: int | None = None
    for k in order:
        if prev is not None:
            waits[k] = max(0.0, waits[prev] + service[prev] - (arrival[k] - arrival[prev]))
        prev = k
    return waits


def ref_batched_waits(arrival: list[float], service: list[float], batch: list[int]) -> list[float]:
    jobs: dict[tuple[str, int], list[int]] = {}
    for k, bid in enumerate(batch):
        jobs.setdefault(("b", bid) if bid >= 0 else ("solo", k), []).append(k)
    keys = list(jobs)
    job_arr = [max(arrival[k] for k in jobs[j]) for j in keys]
    job_srv = [max(service[k] for k in jobs[j]) for j in keys]
    job_wait = ref_fifo_waits(job_arr, job_srv)
    waits = [0.0] * len(arrival)
    for j, key in enumerate(keys):
        for k in jobs[key]:
            waits[k] = job_arr[j] + job_wait[j] - arrival[k]
    return waits


def ref_replay(run: RunArrays, hw: HardwareProfile, p: CostParams) -> dict[str, list[list[float]]]:
    """Predicted (n_req x 6) stage table and the queue wait, the slow obvious way: each stage is
    its observed time moved by (predicted - observed) op aggregate; ingress = wait + work."""
    n_req = run.requests.size
    ops = ref_op_times(run, hw, p)
    observed_ops = [0.0 if math.isnan(v) else float(v) for v in run.ops.observed_us]
    pred, barrier = ref_stage_times(run, [o.predicted_us for o in ops], n_req)
    obs, _ = ref_stage_times(run, observed_ops, n_req)
    rows: list[list[float]] = []
    works: list[float] = []
    for r in range(n_req):
        seen = [0.0 if math.isnan(v) else float(v) for v in run.requests.stage_us[r]]
        wait_seen = float(run.requests.start_us[r] - run.requests.arrival_us[r])
        if not math.isfinite(wait_seen):
            wait_seen = seen[0] - obs[r][0]
        wait_seen = max(wait_seen, 0.0)
        row = [max(0.0, seen[s] + pred[r][s] - obs[r][s]) for s in range(N_STAGES)] + [seen[5]]
        works.append(max(0.0, max(seen[0] - wait_seen, 0.0) + pred[r][0] - obs[r][0]))
        row[0] = works[-1]
        rows.append(row)
    service = [sum(row) for row in rows]
    arrival = run.requests.arrival_us.tolist()
    if run.requests.batch_id is None:
        waits = ref_fifo_waits(arrival, service)
    else:
        waits = ref_batched_waits(arrival, service, run.requests.batch_id.tolist())
    for r in range(n_req):
        rows[r][0] = waits[r] + works[r]
    return {"predicted": rows, "barrier": barrier, "wait": [[w] for w in waits]}


def random_run(
    seed: int,
    n_req: int = 20,
    ops_per_req: int = 30,
    nan_share: float = 0.05,
    batched: bool = False,
    nan_observed: bool = True,
) -> RunArrays:
    """A random but plausible run: GEMMs with tiles, fused elementwise groups, H2D/D2H copies,
    unmodelled ops (no flops/bytes), ops on cores and off, NaNs sprinkled in the inputs (in
    observed durations too unless nan_observed is False, as in real traces)."""
    import numpy as np

    from accel.ops import OpArrays, RequestArrays

    rng = np.random.default_rng(seed)
    n = n_req * ops_per_req
    req = np.repeat(np.arange(n_req, dtype=np.int64), ops_per_req)
    # Stage mix per op: mostly execution, some of each other stage, a few unattributed (-1).
    stage = rng.choice([0, 1, 2, 3, 3, 3, 3, 3, 4, -1], size=n).astype(np.int8)
    kind = rng.integers(0, 4, size=n)  # 0 GEMM, 1 elementwise, 2 copy, 3 unmodelled
    m = rng.choice([1.0, 7.0, 64.0, 128.0, 333.0, 1024.0, 4096.0], size=n)
    nn = rng.choice([1.0, 64.0, 96.0, 256.0, 1000.0, 8192.0], size=n)
    k = rng.choice([16.0, 64.0, 512.0, 4096.0], size=n)
    flops = np.where(kind == 0, 2 * m * nn * k, np.where(kind == 1, m * nn, np.nan))
    nbytes = np.where(kind == 3, np.nan, (m * k + k * nn + m * nn) * 2.0)
    nbytes = np.where(kind == 2, rng.uniform(1e3, 5e8, n), nbytes)
    flops = np.where(kind == 2, 0.0, flops)
    tile_m = np.where(kind == 0, rng.choice([64.0, 128.0, 256.0], n), np.nan)
    tile_n = np.where(kind == 0, rng.choice([64.0, 128.0, 256.0], n), np.nan)
    fusion = np.where((kind == 1) & (rng.random(n) < 0.7), rng.integers(0, 4, n), -1)
    # Occasionally a huge fused group, to exercise spill.
    nbytes = np.where((fusion == 3) & (rng.random(n) < 0.5), rng.uniform(1e7, 3e8, n), nbytes)
    tier = np.where(kind == 2, 2, rng.choice([-1, 0, 1, 1], size=n)).astype(np.int8)
    core = np.where(rng.random(n) < 0.5, rng.integers(0, 6, n), -1).astype(np.int32)
    observed = rng.lognormal(3.0, 1.0, n)
    for arr in (
        (flops, nbytes, m, nn, tile_m, observed) if nan_observed else (flops, nbytes, m, nn, tile_m)
    ):
        arr[rng.random(n) < nan_share] = np.nan
    ops = OpArrays(
        req=req,
        stage=stage,
        observed_us=observed,
        flops=flops,
        bytes=nbytes,
        m=m,
        n=nn,
        tile_m=tile_m,
        tile_n=tile_n,
        fusion_group=fusion.astype(np.int64),
        mem_tier=tier,
        core=core,
        fallback=rng.random(n) < 0.1,
        recompile=rng.random(n) < 0.02,
        predicted_us=np.full(n, np.nan),
    )
    arrival = np.cumsum(rng.exponential(2000.0, n_req))
    arrival[rng.random(n_req) < 0.2] = arrival[0]  # ties in arrival order
    stage_us = rng.lognormal(4.0, 1.0, (n_req, 6))
    wait = rng.exponential(100.0, n_req)
    stage_us[:, 0] += wait
    latency = stage_us.sum(axis=1)
    requests = RequestArrays(
        request_id=[f"r{i}" for i in range(n_req)],
        arrival_us=arrival,
        start_us=arrival + wait,
        latency_us=latency,
        stage_us=stage_us,
        batch_size=np.ones(n_req, dtype=np.int32),
        shape_key=[""] * n_req,
        batch_id=rng.integers(-1, max(2, n_req // 3), n_req) if batched else None,
    )
    return RunArrays(run_id=f"random-{seed}", ops=ops, requests=requests)
