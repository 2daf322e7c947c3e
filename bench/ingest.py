"""Import speed and memory: a Kineto-shaped trace of >= 200 MB / >= 500k events into a store.

Builds the trace in a temporary directory (or takes one), then imports it --repeat times, each
in a fresh interpreter, and reports medians of: import seconds (the ingest() call), MB/s,
events/s, peak RSS of the importing process (wait4 rusage of that child; the final
getrusage(RUSAGE_CHILDREN) max is printed too) and its CPU seconds. MB and MB/s are of the JSON
text the importer parsed (uncompressed, also for a .gz trace). The ratios against HTA use
--hta-json (the output of bench/hta_reference.py, measured) or else the figures quoted in the
issue (labelled so). Ends with one JSON line.

    uv run python bench/ingest.py [--trace PATH] [--mb 209] [--repeat 3] [--profile]
        [--hta-json HTA_OUTPUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# HTA's load of the 209 MB trace as the issue quotes it: used only without --hta-json, and
# labelled "quoted" (bench/hta_reference.py measured ~24-27 s and 1158 MB on this machine).
QUOTED_HTA_SECONDS = 18.4
QUOTED_HTA_RSS_MB = 1360.0

KERNELS = [
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{}x{}_32x3_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{}x{}_32x3_tn_align8::Params)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>,"
    " at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>) [{}x{}]",
    "ampere_bf16_s16816gemm_bf16_{}x{}_ldg8_f2f_stages_64x3_tn",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*) [{}x{}]",
]
OPS = ["aten::mm", "aten::addmm", "aten::add", "aten::layer_norm", "aten::gelu", "aten::bmm"]


def build_trace(path: Path, target_mb: float, seed: int = 7) -> tuple[int, int]:
    """Write a Kineto-like trace (ProfilerSteps of cpu_op -> cudaLaunchKernel -> kernel with
    ac2g flows, plus memcpys); returns (bytes, events)."""
    rng = random.Random(seed)
    pid, tid, gpu_pid = 4515, 4515, 0
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "record_shapes": 1,
    }
    target = int(target_mb * 1e6)
    n_events = 0
    ts = 1_683_564_901_548_726
    ext = 1
    corr = 100_000
    with open(path, "w", encoding="utf-8") as fh:
        head = json.dumps(header)[:-1]
        fh.write(head + ', "traceEvents": [\n')
        written = len(head) + 20
        meta = [
            {
                "name": "process_name",
                "ph": "M",
                "ts": ts,
                "pid": pid,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": ts,
                "pid": pid,
                "tid": tid,
                "args": {"name": "thread 1"},
            },
        ]
        step = 0
        first = True
        while written < target:
            step_start = ts
            batch: list[dict[str, Any]] = list(meta) if first else []
            first = False
            t = ts + 10
            for _ in range(2000):
                m, n, k = (rng.choice((64, 128, 256, 512, 1024)) for _ in range(3))
                dur_op = rng.randint(20, 60)
                op = rng.choice(OPS)
                batch.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": op,
                        "pid": pid,
                        "tid": tid,
                        "ts": t,
                        "dur": dur_op,
                        "args": {
                            "External id": ext,
                            "Record function id": 0,
                            "Ev Idx": ext,
                            "Input Dims": [[m, k], [k, n], []],
                            "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"],
                            "Input Strides": [[k, 1], [n, 1], []],
                            "Concrete Inputs": ["", "", "1"],
                            "Sequence number": ext,
                            "Fwd thread id": 0,
                        },
                    }
                )
                rt = t + rng.randint(2, 8)
                batch.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernel",
                        "pid": pid,
                        "tid": tid,
                        "ts": rt,
                        "dur": rng.randint(4, 9),
                        "args": {"External id": ext, "cbid": 211, "correlation": corr},
                    }
                )
                kt = rt + rng.randint(5, 40)
                kname = rng.choice(KERNELS).format(m, n, m, n)
                batch.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": kname,
                        "pid": gpu_pid,
                        "tid": 7,
                        "ts": kt,
                        "dur": rng.randint(5, 300),
                        "args": {
                            "External id": ext,
                            "queued": 0,
                            "device": 0,
                            "context": 1,
                            "stream": 7,
                            "correlation": corr,
                            "registers per thread": 96,
                            "shared memory": 49152,
                            "blocks per SM": 1.5,
                            "warps per SM": 12.0,
                            "grid": [m // 64, n // 64, 1],
                            "block": [128, 1, 1],
                            "est. achieved occupancy %": 19,
                        },
                    }
                )
                batch.append(
                    {
                        "ph": "s",
                        "id": corr,
                        "pid": pid,
                        "tid": tid,
                        "ts": rt,
                        "cat": "ac2g",
                        "name": "ac2g",
                    }
                )
                batch.append(
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": gpu_pid,
                        "tid": 7,
                        "ts": kt,
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
                if rng.random() < 0.05:
                    batch.append(
                        {
                            "ph": "X",
                            "cat": "gpu_memcpy",
                            "name": "Memcpy HtoD (Pinned -> Device)",
                            "pid": gpu_pid,
                            "tid": 25,
                            "ts": kt,
                            "dur": 12,
                            "args": {
                                "External id": ext,
                                "device": 0,
                                "context": 1,
                                "stream": 25,
                                "correlation": corr + 1,
                                "bytes": 147456,
                                "memory bandwidth (GB/s)": 11.4,
                            },
                        }
                    )
                ext += 1
                corr += 2
                t += dur_op + rng.randint(1, 5)
            batch.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{step}",
                    "pid": pid,
                    "tid": tid,
                    "ts": step_start,
                    "dur": t - step_start + 5,
                    "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext},
                }
            )
            ext += 1
            text = ",\n".join(json.dumps(e) for e in batch)
            fh.write(("" if step == 0 else ",\n") + text)
            written += len(text) + 2
            n_events += len(batch)
            ts = t + 50
            step += 1
        fh.write("\n]}\n")
    return path.stat().st_size, n_events


def child(trace: Path, store: Path, out: Path, profile: bool) -> None:
    """Import once in this fresh process; write the figures as JSON."""
    from workbench.store.ingest import ingest

    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        report = ingest(store, trace, run_id="bench")
        prof.disable()
        seconds = time.perf_counter() - start
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
    else:
        start = time.perf_counter()
        report = ingest(store, trace, run_id="bench")
        seconds = time.perf_counter() - start
    out.write_text(
        json.dumps(
            {
                "seconds": seconds,
                "events": report.events_read,
                "kept": report.events_kept,
                "requests": report.requests,
                "json_bytes": report.bytes_read,
            }
        ),
        encoding="utf-8",
    )


def sample(trace: Path, work: Path, profile: bool) -> dict[str, float]:
    """One import in a fresh interpreter: seconds, events, peak RSS (MB) of that process."""
    store = work / "store"
    out = work / "figures.json"
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(trace),
        str(store),
        str(out),
    ] + (["--profile"] if profile else [])
    wall0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - wall0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"import child failed with {proc.returncode}")
    figures: dict[str, float] = json.loads(out.read_text(encoding="utf-8"))
    figures["rss_mb"] = usage.ru_maxrss / 1024.0  # Linux: KiB
    # CPU seconds of the whole child (start-up included): steadier than wall time on a busy box.
    figures["cpu_s"] = usage.ru_utime + usage.ru_stime
    figures["wall_s"] = wall
    shutil.rmtree(store, ignore_errors=True)
    return figures


def hta_reference(path: Path | None) -> dict[str, Any]:
    """HTA's seconds and peak RSS: measured (the last JSON line of bench/hta_reference.py's
    output in `path`) or, without a path, the issue's quoted figures."""
    if path is None:
        return {
            "kind": "quoted",
            "source": "the issue's figures, not measured here",
            "seconds": QUOTED_HTA_SECONDS,
            "rss_mb": QUOTED_HTA_RSS_MB,
        }
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"{path}: cannot read HTA figures: {exc}") from exc
    # The script's figures are its last line that is a JSON object (a saved log may go on).
    lines = [ln for ln in text.splitlines() if ln.lstrip().startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: last JSON line is malformed ({exc})") from exc
    if not isinstance(doc, dict):
        raise SystemExit(f"{path}: no JSON line of bench/hta_reference.py's figures")
    figures: dict[str, Any] = {"kind": "measured", "source": str(path)}
    for key, name in (("hta_seconds_median", "seconds"), ("hta_peak_rss_mb_median", "rss_mb")):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SystemExit(f"{path}: {key} missing or not a positive number")
        figures[name] = float(value)
    if isinstance(doc.get("trace_mb"), int | float):
        figures["trace_mb"] = float(doc["trace_mb"])
    return figures


def versus_hta(seconds: float, rss_mb: float, ref: dict[str, Any]) -> dict[str, Any]:
    """speedup_vs_hta (HTA seconds / ours) and rss_ratio_vs_hta (ours / HTA), with their source."""
    return {
        "speedup_vs_hta": round(ref["seconds"] / seconds, 2),
        "rss_ratio_vs_hta": round(rss_mb / ref["rss_mb"], 3),
        "hta_reference": ref["kind"],
        "hta_source": ref["source"],
        "hta_seconds": ref["seconds"],
        "hta_peak_rss_mb": ref["rss_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="use this trace instead")
    parser.add_argument("--mb", type=float, default=209.0, help="size of the built trace")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one import, then exit")
    parser.add_argument(
        "--hta-json",
        type=Path,
        default=None,
        help="output of bench/hta_reference.py (its last line is read): measured HTA figures",
    )
    parser.add_argument("--child", nargs=3, type=Path, metavar=("TRACE", "STORE", "OUT"))
    args = parser.parse_args()
    if args.child:
        child(*args.child, profile=args.profile)
        return
    ref = hta_reference(args.hta_json)
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        work = Path(tmp)
        trace = args.trace
        if trace is None:
            trace = work / "kineto_bench.json"
            t0 = time.perf_counter()
            size, n = build_trace(trace, args.mb)
            print(
                f"built {trace.name}: {size / 1e6:.1f} MB, {n} events "
                f"in {time.perf_counter() - t0:.1f} s"
            )
        file_size = trace.stat().st_size
        if args.profile:
            sample(trace, work, profile=True)
            return
        runs = [sample(trace, work, profile=False) for _ in range(args.repeat)]
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: import {r['seconds']:.2f} s (process {r['wall_s']:.2f} s, "
            f"cpu {r['cpu_s']:.2f} s), "
            f"peak RSS {r['rss_mb']:.0f} MB, {r['events']:.0f} events, "
            f"{r['requests']:.0f} requests"
        )
    sec = statistics.median(r["seconds"] for r in runs)
    rss = statistics.median(r["rss_mb"] for r in runs)
    events = runs[0]["events"]
    # What the importer parsed: for a .gz trace the decompressed JSON, not the file.
    size = runs[0]["json_bytes"]
    print(f"trace: {size / 1e6:.1f} MB of JSON (uncompressed), file {file_size / 1e6:.1f} MB")
    vs = versus_hta(sec, rss, ref)
    print(
        f"vs HTA ({ref['kind']}: {ref['source']}): {ref['seconds']:.1f} s, "
        f"{ref['rss_mb']:.0f} MB -> speed-up {vs['speedup_vs_hta']}x, "
        f"RSS ratio {vs['rss_ratio_vs_hta']}"
    )
    ref_mb = ref.get("trace_mb")
    if ref_mb is not None and abs(ref_mb - size / 1e6) > 0.02 * ref_mb:
        print(f"note: HTA measured a {ref_mb} MB trace, this run {size / 1e6:.1f} MB")
    figures = {
        "trace_mb": round(size / 1e6, 1),
        "file_mb": round(file_size / 1e6, 1),
        "events": int(events),
        "repeat": len(runs),
        "import_s_median": round(sec, 3),
        "import_s_min": round(min(r["seconds"] for r in runs), 3),
        "process_s_median": round(statistics.median(r["wall_s"] for r in runs), 3),
        "process_cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "mb_per_s": round(size / 1e6 / sec, 1),
        "events_per_s": round(events / sec),
        "peak_rss_mb_median": round(rss),
        "peak_rss_mb_max_children": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
        ),
        **vs,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
