"""A real-shaped eager serving trace: what PyTorch's profiler writes with shapes, stack and memory.

Modelled on the eager inference captures in /work/shared/traces/serving (bert_small_h100: with
record_shapes, with_stack, profile_memory): per operator a stack of `python_function` frames
(Python id / parent id), a `cpu_op` with its children carrying the full shape args (External
id, Record function id, Concrete Inputs, Input type, Input Strides, Input Dims, Ev Idx), a
`[memory]` instant event, the `cudaLaunchKernel`, the kernel with its launch args and the ac2g
flow pair; requests are top-level `user_annotation`s as a server's record_function makes.
The document is laid out as those captures are (json indent=2), which with these args comes to
about 400 bytes per event, as the issue's real 209.6 MB / 504k-event serving trace.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

FRAMES = (
    "serve.py(211): handle",
    "torch/utils/_contextlib.py(116): decorate_context",
    "torch/nn/modules/module.py(1750): _call_impl",
    "torch/nn/modules/module.py(1739): _wrapped_call_impl",
    "transformers/models/bert/modeling_bert.py({line}): forward",
    "torch/nn/modules/linear.py(125): forward",
)
OPS = (  # (parent op, child op that launches, kernel)
    ("aten::linear", "aten::addmm", "ampere_bf16_s16816gemm_bf16_{m}x{n}_ldg8_f2f_stages_64x3_tn"),
    ("aten::matmul", "aten::bmm", "ampere_bf16_s16816gemm_bf16_{m}x{n}_ldg8_f2f_stages_64x3_nn"),
    (
        "aten::layer_norm",
        "aten::native_layer_norm",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
        "float*, float*, c10::BFloat16*) [{m}x{n}]",
    ),
    (
        "aten::gelu",
        "aten::gelu",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
        "(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#2}}::operator()() const, "
        "std::array<char*, 2ul> >(int, {m}, {n})",
    ),
)


def _cpu(
    name: str, pid: int, ts: float, dur: float, ext: int, ev: int, dims: tuple[int, ...]
) -> dict[str, Any]:
    """A cpu_op with its shape args: (bias, input, weight) for an op, (weight) for aten::t."""
    m, n, k = dims
    ins = [("c10::BFloat16", [n], [1], ""), ("c10::BFloat16", [m, k], [k, 1], ""),
           ("c10::BFloat16", [k, n], [1, k], "")]  # fmt: skip
    if name == "aten::t":
        ins = ins[2:]
    return {
        "ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": pid,
        "ts": round(ts, 3), "dur": round(dur, 3),
        "args": {
            "External id": ext, "Record function id": 0,
            "Concrete Inputs": [i[3] for i in ins],
            "Input type": [i[0] for i in ins],
            "Input Strides": [i[2] for i in ins],
            "Input Dims": [i[1] for i in ins],
            "Ev Idx": ev,
        },
    }  # fmt: skip


def build_trace(path: Path, target_mb: float, seed: int = 7) -> tuple[int, int]:
    """Write the trace to `path` until it holds about target_mb MB; returns (bytes, events)."""
    rng = random.Random(seed)
    pid = 19392
    header = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85018279936,
                "numSms": 132,
                "computeMajor": 9,
                "computeMinor": 0,
            }
        ],
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12090,
        "record_shapes": 1,
        "profile_memory": 1,
        "with_stack": 1,
        "with_flops": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1751410836000000000,
    }
    target = int(target_mb * 1e6)
    ts = 1_419_247_333_000.0
    ext = ev = py_id = 1
    corr = 8000
    allocated = 91_793_920
    n_events = 0
    with open(path, "w", encoding="utf-8") as fh:
        # As the serving captures are laid out: the document through json.dumps(indent=2).
        head = json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n'
        fh.write(head)
        written = len(head)
        first = True
        while written < target:
            out: list[dict[str, Any]] = []
            start = ts
            t = ts + 4.0
            for _ in range(rng.randint(8, 14)):
                parent, child, kernel = rng.choice(OPS)
                dims = tuple(rng.choice((128, 256, 512, 768, 1024)) for _ in range(3))
                m, n, _k = dims
                kdur = rng.uniform(3.0, 60.0)
                span = kdur + 40.0
                parent_py = 0
                for depth, frame in enumerate(FRAMES):
                    out.append({
                        "ph": "X", "cat": "python_function",
                        "name": frame.format(line=rng.choice((221, 355, 462, 508))),
                        "pid": pid, "tid": pid,
                        "ts": round(t + depth * 0.4, 3), "dur": round(span - depth * 0.8, 3),
                        "args": {"Python parent id": parent_py, "Python id": py_id, "Ev Idx": ev},
                    })  # fmt: skip
                    parent_py, py_id, ev = py_id, py_id + 1, ev + 1
                c0 = t + len(FRAMES) * 0.4
                out.append(_cpu(parent, pid, c0, span - 6.0, ext, ev, dims))
                out.append(_cpu("aten::t", pid, c0 + 1.0, 2.5, ext + 1, ev + 1, dims))
                out.append(_cpu(child, pid, c0 + 4.0, span - 12.0, ext + 2, ev + 2, dims))
                nb = 2 * m * n
                allocated += nb
                out.append({
                    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                    "pid": pid, "tid": pid, "ts": round(c0 + 4.5, 3),
                    "args": {
                        "Total Reserved": 121_634_816 + allocated // 2,
                        "Total Allocated": allocated, "Bytes": nb,
                        "Addr": 128180985266176 + allocated, "Device Id": 0, "Device Type": 1,
                        "Ev Idx": ev + 3,
                    },
                })  # fmt: skip
                rt = round(c0 + 6.0, 3)
                kt = round(rt + rng.uniform(4.0, 30.0), 3)
                out.append({
                    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                    "pid": pid, "tid": pid, "ts": rt, "dur": 5.14,
                    "args": {"External id": ext + 2, "cbid": 211, "correlation": corr},
                })  # fmt: skip
                out.append({
                    "ph": "X", "cat": "kernel", "name": kernel.format(m=m, n=n),
                    "pid": 0, "tid": 7, "ts": kt, "dur": round(kdur, 3),
                    "args": {
                        "External id": ext + 2, "queued": 0, "device": 0, "context": 1,
                        "stream": 7, "correlation": corr, "registers per thread": 24,
                        "shared memory": 0, "blocks per SM": 1.068182, "warps per SM": 4.272727,
                        "grid": [m // 64, n // 64, 1], "block": [128, 1, 1],
                        "est. achieved occupancy %": 7,
                    },
                })  # fmt: skip
                out.append({"ph": "s", "id": corr, "pid": pid, "tid": pid, "ts": rt,
                            "cat": "ac2g", "name": "ac2g"})  # fmt: skip
                out.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": kt,
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})  # fmt: skip
                allocated -= nb // 2
                ext, ev, corr = ext + 3, ev + 4, corr + 1
                t += span + rng.uniform(2.0, 9.0)
            out.insert(0, {
                "ph": "X", "cat": "user_annotation", "name": "request", "pid": pid, "tid": pid,
                "ts": round(start, 3), "dur": round(t - start, 3),
                "args": {"External id": ext, "Record function id": 0, "Ev Idx": ev},
            })  # fmt: skip
            ext, ev = ext + 1, ev + 1
            n_events += len(out)
            text = ",\n".join(_indent(json.dumps(e, indent=2)) for e in out)
            text = ("" if first else ",\n") + text
            first = False
            fh.write(text)
            written += len(text)
            ts = t + rng.uniform(20.0, 400.0)
        fh.write('\n  ],\n  "traceName": "serve.pt.trace.json"\n}\n')
    return path.stat().st_size, n_events


def _indent(text: str) -> str:
    return "    " + text.replace("\n", "\n    ")
