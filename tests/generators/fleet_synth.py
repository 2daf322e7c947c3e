"""Synthetic Kineto-shaped serving traces of a fleet (hosts x ranks), for tests and benches.

Each file is one rank's capture: a header naming its host, rank and driver, then requests (a
top-level `user_annotation`, as a server's record_function makes) each running a few operators
that launch kernels (cpu_op -> cudaLaunchKernel -> kernel, ac2g flows), with the args a profiler
records with shapes (about 400 bytes per event). A slowed host's kernels take `slow` times as
long in a tenth of its requests, so its tail (not its median) moves.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

OPS = ("aten::mm", "aten::addmm", "aten::layer_norm", "aten::gelu", "aten::bmm")
KERNEL = "ampere_bf16_s16816gemm_bf16_{m}x{n}_ldg8_f2f_stages_64x3_tn"
_CPU = (
    '{{"ph":"X","cat":"cpu_op","name":"{op}","pid":{pid},"tid":{pid},"ts":{ts},"dur":{dur},'
    '"args":{{"External id":{ext},"Record function id":0,"Ev Idx":{ext},'
    '"Input Dims":[[{m},{k}],[{k},{n}],[]],"Input type":["c10::BFloat16","c10::BFloat16","Scalar"],'
    '"Input Strides":[[{k},1],[{n},1],[]],"Concrete Inputs":["","","1"],'
    '"Sequence number":{ext},"Fwd thread id":0}}}}'
)
_LAUNCH = (
    '{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":{pid},"tid":{pid},'
    '"ts":{ts},"dur":5,"args":{{"External id":{ext},"cbid":211,"correlation":{corr}}}}}'
)
_KERNEL = (
    '{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{ts},"dur":{dur},'
    '"args":{{"External id":{ext},"queued":0,"device":0,"context":1,"stream":7,'
    '"correlation":{corr},"registers per thread":96,"shared memory":49152,'
    '"grid":[{gm},{gn},1],"block":[128,1,1],"est. achieved occupancy %":19}}}}'
)
_FLOW = (
    '{{"ph":"s","id":{corr},"pid":{pid},"tid":{pid},"ts":{rt},"cat":"ac2g","name":"ac2g"}},\n'
    '{{"ph":"f","id":{corr},"pid":0,"tid":7,"ts":{kt},"cat":"ac2g","name":"ac2g","bp":"e"}}'
)
_REQUEST = (
    '{{"ph":"X","cat":"user_annotation","name":"request","pid":{pid},"tid":{pid},"ts":{ts},'
    '"dur":{dur},"args":{{"External id":{ext}}}}}'
)


@dataclass(frozen=True)
class Member:
    """One file of the fleet: host, rank, driver and how much slower its tail is."""

    host: str
    rank: int
    driver: str
    slow: float = 1.0


def fleet_members(
    hosts: int, ranks: int, slow_hosts: tuple[int, ...] = (), slow: float = 3.0
) -> list[Member]:
    """hosts x ranks members; the slowed hosts run an older driver (their shared tag)."""
    out = []
    for h in range(hosts):
        is_slow = h in slow_hosts
        driver = "535.54.03" if is_slow else "550.90.07"
        for r in range(ranks):
            out.append(Member(f"host{h:02d}", h * ranks + r, driver, slow if is_slow else 1.0))
    return out


def write_member(
    path: Path, m: Member, *, requests: int, ops: int = 6, seed: int = 0, world: int = 64
) -> tuple[int, int]:
    """Write one member's trace (gzip when path ends in .gz); returns (JSON bytes, events)."""
    rng = random.Random(seed * 1_000_003 + m.rank)
    pid = 4000 + m.rank
    header = {
        "schemaVersion": 1,
        "hostname": m.host,
        "cuda_driver_version": m.driver,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": m.rank, "world_size": world},
        "record_shapes": 1,
    }
    parts: list[str] = []
    ts = 1_700_000_000_000_000 + m.rank * 1000
    ext = corr = 1
    n_events = 0
    for _ in range(requests):
        tail = m.slow if rng.random() < 0.1 else 1.0
        start = ts
        t = ts + 5
        body: list[str] = []
        for _ in range(ops):
            mm, nn, kk = (rng.choice((128, 256, 512, 1024)) for _ in range(3))
            kdur = int(rng.randint(20, 60) * tail)
            body.append(
                _CPU.format(
                    op=rng.choice(OPS), pid=pid, ts=t, dur=kdur + 30, ext=ext, m=mm, n=nn, k=kk
                )
            )
            rt = t + 3
            kt = rt + 8
            body.append(_LAUNCH.format(pid=pid, ts=rt, ext=ext, corr=corr))
            body.append(
                _KERNEL.format(
                    name=KERNEL.format(m=mm, n=nn),
                    ts=kt,
                    dur=kdur,
                    ext=ext,
                    corr=corr,
                    gm=mm // 64,
                    gn=nn // 64,
                )
            )
            body.append(_FLOW.format(corr=corr, pid=pid, rt=rt, kt=kt))
            n_events += 5
            t += kdur + 40
            ext += 1
            corr += 1
        parts.append(_REQUEST.format(pid=pid, ts=start, dur=t - start, ext=ext))
        parts.extend(body)
        n_events += 1
        ts = t + rng.randint(50, 400)
    head = json.dumps(header)[:-1]
    text = head + ', "traceEvents": [\n' + ",\n".join(parts) + "\n]}\n"
    data = text.encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data, compresslevel=1))
    else:
        path.write_bytes(data)
    return len(data), n_events


def write_fleet(
    folder: Path,
    members: list[Member],
    *,
    requests: int,
    ops: int = 6,
    seed: int = 0,
    suffix: str = ".pt.trace.json",
    flat: bool = False,
) -> list[Path]:
    """One file per member under folder/<host>/ (or folder/<host>_rank<r> when flat, as HTA
    wants its trace_dir); returns the paths in member order."""
    paths = []
    for m in members:
        d = folder if flat else folder / m.host
        d.mkdir(parents=True, exist_ok=True)
        p = d / (f"{m.host}_rank{m.rank:03d}{suffix}" if flat else f"rank{m.rank:03d}{suffix}")
        write_member(p, m, requests=requests, ops=ops, seed=seed, world=len(members))
        paths.append(p)
    return paths
