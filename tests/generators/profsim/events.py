"""The events a profiler records for profsim requests: spans on each request's thread, launches
linked to kernels and copies on device streams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.ops import F64
from generators.profsim.device import OPS
from generators.profsim.world import Service

HOST_PID: Final[int] = 1
DEVICE_PID: Final[int] = 0

# Event columns (one entry per event). Unknown: -1, NaN or "".
Events = dict[str, np.ndarray]


@dataclass(frozen=True)
class HostWork:
    """Per request: host-side durations (µs) and copy sizes (bytes)."""

    admit: F64
    lookup: F64
    compile_us: F64
    plan: F64
    h2d: F64
    h2d_bytes: F64
    d2h: F64
    d2h_bytes: F64
    post: F64


@dataclass(frozen=True)
class DeviceWork:
    """Per request: kernel columns (from device.kernels) and offsets within its execution stage
    (from device.exec_layout); `lane` picks its streams."""

    kernels: dict[str, np.ndarray]
    launch: np.ndarray
    kstart: np.ndarray
    layer_start: np.ndarray
    layer_end: np.ndarray
    launch_us: float
    lane: np.ndarray


class _Builder:
    """Events in blocks of numpy columns."""

    def __init__(self) -> None:
        self.blocks: list[Events] = []
        self.n = 0

    def add(self, n: int, **cols: object) -> np.ndarray:
        """Append n events; returns their indices (event ids)."""
        block: Events = {}
        for k, v in cols.items():
            arr = np.asarray(v)
            block[k] = np.broadcast_to(arr, (n,)).copy() if arr.ndim == 0 else arr.reshape(n)
        self.blocks.append(block)
        ids = np.arange(self.n, self.n + n, dtype=np.int64)
        self.n += n
        return ids

    def concat(self) -> Events:
        defaults: dict[str, object] = {
            "req": -1,
            "stage": "",
            "category": "",
            "name": "",
            "ts": np.nan,
            "dur": np.nan,
            "pid": HOST_PID,
            "tid": -1,
            "stream": -1,
            "core": -1,
            "corr": -1,
            "parent": -1,
            "shape": "",
            "flops": np.nan,
            "bytes": np.nan,
            "kernel": "",
            "fallback": False,
            "recompile": False,
            "predicted": np.nan,
        }
        out: Events = {}
        for k, d in defaults.items():
            parts = [
                b[k] if k in b else np.full(len(next(iter(b.values()))), d) for b in self.blocks
            ]
            out[k] = np.concatenate(parts)
        return out


def record(
    s: Service,
    seq: np.ndarray,
    arrival: F64,
    ready: F64,
    start: F64,
    latency: F64,
    work: HostWork,
    dev: DeviceWork,
) -> Events:
    """Every event of every request, in blocks by kind."""
    n, L, NOPS, C = seq.size, s.layers, len(OPS), s.cores
    admit, lookup, compile_us, plan = work.admit, work.lookup, work.compile_us, work.plan
    h2d, h2d_bytes, d2h, d2h_bytes, post = (
        work.h2d,
        work.h2d_bytes,
        work.d2h,
        work.d2h_bytes,
        work.post,
    )
    k, kdur, launch, kstart = dev.kernels, dev.kernels["dur"], dev.launch, dev.kstart
    layer_start, layer_end, launch_us, lane = (
        dev.layer_start,
        dev.layer_end,
        dev.launch_us,
        dev.lane,
    )
    exec_us = layer_end[:, -1]
    b = _Builder()
    tid = 10_000 + np.arange(n)
    req = np.arange(n)
    shape_in = np.char.add(np.char.add("[[1,", seq.astype(str)), f",{s.hidden}]]")
    ann = b.add(
        n,
        req=req,
        stage="",
        category="user_annotation",
        name=np.char.add("request#", req.astype(str)),
        ts=arrival,
        dur=latency,
        tid=tid,
    )
    b.add(
        n,
        req=req,
        stage="ingress",
        category="cpu_op",
        name="serving.admission",
        ts=arrival,
        dur=admit,
        tid=tid,
        parent=ann,
        shape=shape_in,
    )
    waits = np.flatnonzero(start > ready)
    b.add(
        waits.size,
        req=waits,
        stage="ingress",
        category="user_annotation",
        name="wait_for_batch",
        ts=ready[waits],
        dur=(start - ready)[waits],
        tid=tid[waits],
        parent=ann[waits],
    )
    t = start.copy()
    b.add(
        n,
        req=req,
        stage="lowering",
        category="cpu_op",
        name="TorchDynamo Cache Lookup",
        ts=t,
        dur=lookup,
        tid=tid,
        parent=ann,
    )
    t = t + lookup
    cmp = np.flatnonzero(compile_us > 0)
    b.add(
        cmp.size,
        req=cmp,
        stage="lowering",
        category="cpu_op",
        name="backend_compile",
        ts=t[cmp],
        dur=compile_us[cmp],
        tid=tid[cmp],
        parent=ann[cmp],
        recompile=True,
    )
    t = t + compile_us
    b.add(
        n,
        req=req,
        stage="scheduling",
        category="cpu_op",
        name="memory_plan",
        ts=t,
        dur=plan,
        tid=tid,
        parent=ann,
    )
    t = t + plan
    corr = [0]

    def copy(device_name: str, stage_id: str, ts: F64, dur: F64, nbytes: F64) -> None:
        c0 = corr[0]
        cr = np.arange(c0, c0 + n)
        corr[0] += n
        host = b.add(
            n,
            req=req,
            stage="execution",
            category="cuda_runtime",
            name="cudaMemcpyAsync",
            ts=ts,
            dur=dur,
            tid=tid,
            parent=ann,
            corr=cr,
        )
        b.add(
            n,
            req=req,
            stage=stage_id,
            category="gpu_memcpy",
            name=device_name,
            ts=ts,
            dur=dur,
            pid=DEVICE_PID,
            tid=7,
            stream=7,
            corr=cr,
            parent=host,
            bytes=nbytes,
        )

    copy("Memcpy HtoD (Pinned -> Device)", "scheduling", t, h2d, h2d_bytes)
    t = t + h2d
    # execution: launches on the request thread, kernels on one stream per (slot, core)
    shape4 = kdur.shape
    nk = kdur.size
    r4 = np.broadcast_to(req[:, None, None, None], shape4).ravel()
    cr = np.arange(corr[0], corr[0] + nk)
    corr[0] += nk
    lts = (t[:, None, None, None] + launch).ravel()
    host = b.add(
        nk,
        req=r4,
        stage="execution",
        category="cuda_runtime",
        name="cudaLaunchKernel",
        ts=lts,
        dur=launch_us,
        tid=tid[r4],
        parent=ann[r4],
        corr=cr,
    )
    core4 = np.broadcast_to(np.arange(C)[None, None, None, :], shape4).ravel()
    stream = 20 + lane[r4] * C + core4
    dims_mm = np.char.add(
        np.char.add(np.char.add("[[", k["rows"].astype(np.int64).astype(str)), ","),
        k["k"].astype(np.int64).astype(str),
    )
    dims = np.where(
        k["mm"],
        np.char.add(
            np.char.add(np.char.add(dims_mm, "],["), k["k"].astype(np.int64).astype(str)),
            np.char.add(np.char.add(",", k["n"].astype(np.int64).astype(str)), "]]"),
        ),
        np.char.add(dims_mm, "]]"),
    )
    b.add(
        nk,
        req=r4,
        stage="execution",
        category="kernel",
        name=k["kernel"].ravel(),
        ts=(t[:, None, None, None] + kstart).ravel(),
        dur=kdur.ravel(),
        pid=DEVICE_PID,
        tid=stream,
        stream=stream,
        core=core4,
        corr=cr,
        parent=host,
        shape=dims.ravel(),
        flops=k["flops"].ravel(),
        bytes=k["bytes"].ravel(),
        kernel=k["kernel"].ravel(),
        fallback=k["fallback"].ravel(),
        predicted=k["predicted"].ravel(),
    )
    last_launch = layer_start + NOPS * C * launch_us
    nl = n * L
    rl = np.repeat(req, L)
    b.add(
        nl,
        req=rl,
        stage="execution",
        category="cuda_runtime",
        name="cudaStreamSynchronize",
        ts=(t[:, None] + last_launch).ravel(),
        dur=(layer_end - last_launch).ravel(),
        tid=tid[rl],
        parent=ann[rl],
    )
    t = t + exec_us
    copy("Memcpy DtoH (Device -> Pageable)", "assembly", t, d2h, d2h_bytes)
    t = t + d2h
    b.add(
        n,
        req=req,
        stage="assembly",
        category="cpu_op",
        name="postprocess",
        ts=t,
        dur=post,
        tid=tid,
        parent=ann,
    )
    return b.concat()
