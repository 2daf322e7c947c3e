"""Record the real-fault corpus: pairs of a small served model, one real code change per fault.

Needs the PyTorch CPU wheel, which is not a project dependency (run outside the project venv):
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python bench/corpus/record.py --out /work/corpus   # both halves
    /tmp/torchvenv/bin/python bench/corpus/record.py --out D --half blind --only lowering

Each run is its own process: a Poisson (or bursty) arrival process starts one thread per request;
the request waits for the worker (`queue_wait`, FIFO), is tokenized (`admission`), has its input
placed (`schedule`), runs the torch.compile'd model, and is post-processed and checked (`postprocess`,
`validate`), every stage a `record_function` annotation as a service emits them. The PyTorch
profiler records all threads (Kineto JSON), TORCH_TRACE the compile log. The two runs of a pair
are live at once and serve their requests in alternating blocks of about 40 (ABBA), so a load
that comes and goes on the machine falls on both alike. `manifest.json` in the output names
every pair with its true origin stage and mechanism.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# The torch fixtures' way of keeping a recorded run (gzip with zero mtime, the one log).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "torch"))
from make_torch_fixtures import keep_recording

# (fault kind) -> (true origin stage, true mechanism). Mechanism ids are DESIGN §5's.
TRUTH: dict[str, tuple[str, str]] = {
    "none": ("none", "none"),
    "slow_tokenizer": ("ingress", "queueing"),
    "bursty_arrivals": ("ingress", "queueing"),
    "higher_rate": ("ingress", "queueing"),
    "break_item": ("lowering", "graph_break"),
    "break_print": ("lowering", "graph_break"),
    "break_branch": ("lowering", "graph_break"),
    "break_unsupported": ("lowering", "graph_break"),
    "static_shapes": ("lowering", "recompile"),
    "eager_backend": ("lowering", "mapping_fallback"),
    "fresh_buffers": ("scheduling", "bandwidth_bound"),
    "strided_layout": ("scheduling", "bandwidth_bound"),
    "float64": ("execution", "bandwidth_bound"),
    "heavier_layer": ("execution", "bandwidth_bound"),
    "eager_sync": ("execution", "launch_overhead"),
    "slow_detokenize": ("assembly", "assembly"),
    "rerun_check": ("assembly", "assembly"),
    "verbose_logging": ("assembly", "assembly"),
}


@dataclass(frozen=True)
class Run:
    """One recorded run: the service's configuration and its traffic."""

    d_model: int = 64
    requests: int = 120
    seed: int = 0
    rate_per_s: float = 400.0
    burst_cv: float = 1.0  # coefficient of variation of the arrival gaps (1 = Poisson)
    seqs: tuple[int, ...] = (16, 32)
    drift_from: int = -1  # from this request on, a growing share draws unseen lengths
    fault: str = "none"
    magnitude: float = 1.0


@dataclass
class Pair:
    pair_id: str
    half: str
    kind: str
    stage: str
    mechanism: str
    failing: Run
    comparator: Run
    notes: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- the service (worker side)


def serve(run: Run, trace_out: Path) -> None:
    """Warm up, then serve run.requests requests under the profiler and export the trace."""
    import torch
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 8
    fault, mag, d = run.fault, run.magnitude, run.d_model
    dtype = torch.float64 if fault == "float64" else torch.float32
    hidden = 4 * d * (int(2 + 4 * mag) if fault == "heavier_layer" else 1)
    heads = 4
    clip = 1e4
    DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the worker

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1 = torch.nn.LayerNorm(d)
            self.qkv = torch.nn.Linear(d, 3 * d)
            self.proj = torch.nn.Linear(d, d)
            self.n2 = torch.nn.LayerNorm(d)
            self.fc1 = torch.nn.Linear(d, hidden)
            self.fc2 = torch.nn.Linear(hidden, d)

        def attn(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            qkv = self.qkv(self.n1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True)
            return x + self.proj(a.transpose(1, 2).reshape(b, t, d))

        def mlp(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.n2(x))))

    def guard(x: torch.Tensor) -> torch.Tensor:
        # The clip never fires on these inputs: every variant computes the same numbers and
        # only where the check runs differs.
        if fault == "break_item":
            if x.abs().amax().item() > clip:
                x = x.clamp(-clip, clip)
            return x
        if fault == "break_print":
            print("activation check", x.shape, file=DEVNULL)
            return x.clamp(-clip, clip)
        if fault == "break_branch":
            if bool((x.abs() > clip).any()):
                x = x.clamp(-clip, clip)
            return x
        if fault == "break_unsupported":
            torch._dynamo.graph_break()
            return x.clamp(-clip, clip)
        return x.clamp(-clip, clip)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b0, self.b1 = Block(), Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Unrolled: a break inside a loop makes Dynamo skip the whole frame.
            x = guard(self.b0.attn(x))
            x = guard(self.b0.mlp(x))
            x = guard(self.b1.attn(x))
            return guard(self.b1.mlp(x))

    model = Model().eval().to(dtype)
    # eager_backend: Dynamo captures the graph but no backend compiles it (a changed backend).
    backend = "eager" if fault == "eager_backend" else "inductor"
    compiled = torch.compile(model, dynamic=fault != "static_shapes", backend=backend)
    rng = random.Random(run.seed)
    lengths = []
    for i in range(run.requests):
        drifting = run.drift_from >= 0 and i >= run.drift_from
        if drifting and rng.random() < min(0.15 + 0.01 * (i - run.drift_from), 0.6):
            lengths.append(rng.choice((24, 40, 48, 56, 64, 80, 96, 112)))
        else:
            lengths.append(rng.choice(run.seqs))
    gaps = arrival_gaps(rng, run)
    vocab = [f"tok{i}" for i in range(512)]
    texts = [" ".join(rng.choice(vocab) for _ in range(n)) for n in lengths]
    tok_rounds = int(1 + 150 * mag) if fault == "slow_tokenizer" else 1
    detok_rounds = int(5 + 15 * mag) if fault == "slow_detokenize" else 1
    index = {w: i for i, w in enumerate(vocab)}
    emb = torch.randn(len(vocab), d, dtype=dtype, generator=torch.Generator().manual_seed(3))
    buffer = torch.zeros(4, 128, d, dtype=dtype)
    workers = threading.Semaphore(1)
    ticket = threading.Condition()
    order = {"next": 0}

    def tokenize(text: str) -> torch.Tensor:
        ids: list[int] = []
        for _ in range(tok_rounds):
            ids = [index[w] for w in text.split()]
            ids = [i % len(vocab) for i in ids if i >= 0]
        return torch.tensor(ids)

    def place(ids: torch.Tensor) -> torch.Tensor:
        t = ids.numel()
        if fault == "fresh_buffers":
            # A fresh zero-filled staging buffer per request instead of the reused one.
            x = torch.zeros(int(48 * mag), 512, d, dtype=dtype)[:1, :t]
            x.copy_(emb[ids].unsqueeze(0))
            return x.clone()
        if fault == "strided_layout":
            # The input staged through a padded, transposed layout and copied back.
            pad = torch.zeros(512, d, dtype=dtype)
            pad[:t] = emb[ids]
            for _ in range(int(2 + 6 * mag)):
                pad = pad.t().contiguous().t().contiguous()
            return pad[:t].unsqueeze(0).clone()
        buffer[:1, :t].copy_(emb[ids].unsqueeze(0))
        return buffer[:1, :t]

    def finish(y: torch.Tensor, x: torch.Tensor) -> None:
        with record_function("postprocess"):
            scores = y[0].sum(-1)
            for _ in range(detok_rounds):
                words = [vocab[int(i) % len(vocab)] for i in scores.argsort()[:16]]
                " ".join(words)
            if fault == "verbose_logging":
                for _ in range(int(1 + mag)):
                    json.dumps(y[0].tolist())
        with record_function("validate"):
            if fault == "rerun_check":
                for _ in range(int(1 + mag)):
                    compiled(x)
            bool(torch.isfinite(y).all())

    def handle(i: int) -> None:
        with record_function(f"request#{i}"):
            with record_function("queue_wait"):
                with ticket:
                    ticket.wait_for(lambda: order["next"] == i)
                workers.acquire()
                with ticket:
                    order["next"] += 1
                    ticket.notify_all()
            try:
                # Served by the worker in turn, so one request's Python runs at a time: no
                # request's tokenizing contends with another's model call for the GIL.
                with record_function("admission"):
                    ids = tokenize(texts[i])
                with record_function("schedule"):
                    x = place(ids)
                y = compiled(x)
                if fault == "eager_sync":
                    for _ in range(int(40 + 80 * mag)):
                        float(y.mean())
                        y = y * 1.0
                finish(y, x)
            finally:
                workers.release()

    warm = sorted({*run.seqs})
    with torch.no_grad():
        for t in warm:
            ids = torch.tensor([index[w] for w in texts[0].split()][:1] * t)
            x = place(ids)
            compiled(x)
        config = _ExperimentalConfig(profile_all_threads=True)
        # Shapes recorded, as on-call captures usually are: they carry the bytes ops move.
        with profile(
            activities=[ProfilerActivity.CPU], record_shapes=True, experimental_config=config
        ) as prof:
            for k, t in enumerate(warm):
                with record_function(f"warmup#{k}"):
                    compiled(place(torch.zeros(t, dtype=torch.long)))
            _say("ready")
            for lo, hi in blocks(run.requests):
                # The driver's turn: the pair's other run serves its block meanwhile.
                if sys.stdin.readline().strip() != "go":
                    raise SystemExit("worker: the driver went away")
                threads = []
                start = time.perf_counter()
                at = 0.0
                for i in range(lo, hi):
                    at += gaps[i]
                    delay = start + at - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    th = threading.Thread(target=_no_grad(handle), args=(i,))
                    th.start()
                    threads.append(th)
                for th in threads:
                    th.join()
                _say("done")
    prof.export_chrome_trace(str(trace_out))


def blocks(n: int) -> list[tuple[int, int]]:
    """The request ranges a run serves in turns, about 40 requests each, at least two."""
    k = max(2, round(n / 40))
    edges = [round(j * n / k) for j in range(k + 1)]
    return list(itertools.pairwise(edges))


def _say(word: str) -> None:
    # Behind a marker: torch may write to stdout too.
    sys.stdout.write(f"{_MARK}{word}\n")
    sys.stdout.flush()


def _no_grad(fn):  # type: ignore[no-untyped-def]
    import torch

    def inner(*a):  # type: ignore[no-untyped-def]
        with torch.no_grad():
            fn(*a)

    return inner


def arrival_gaps(rng: random.Random, run: Run) -> list[float]:
    """Arrival gaps in seconds: gamma-distributed with the run's mean rate and CV."""
    rate = run.rate_per_s * (1.0 + run.magnitude if run.fault == "higher_rate" else 1.0)
    cv = run.burst_cv * (1.0 + 2.0 * run.magnitude if run.fault == "bursty_arrivals" else 1.0)
    shape = 1.0 / (cv * cv)
    return [rng.gammavariate(shape, 1.0 / (rate * shape)) for _ in range(run.requests)]


# ---------------------------------------------------------------- the corpus (driver side)


def plan(half: str) -> list[Pair]:
    """The pairs of one half. The blind half uses other seeds, sizes, counts and variants."""
    rng = random.Random({"tuning": 11, "blind": 29}[half])
    variants = {
        "tuning": {
            "ingress": ["slow_tokenizer", "bursty_arrivals", "higher_rate"],
            "lowering": ["break_item", "break_branch", "static_shapes", "eager_backend"],
            "scheduling": ["fresh_buffers", "strided_layout"],
            "execution": ["float64", "heavier_layer", "eager_sync"],
            "assembly": ["slow_detokenize", "rerun_check", "verbose_logging"],
        },
        "blind": {
            "ingress": ["slow_tokenizer", "bursty_arrivals", "higher_rate"],
            "lowering": ["break_print", "break_unsupported", "static_shapes", "eager_backend"],
            "scheduling": ["fresh_buffers", "strided_layout"],
            "execution": ["float64", "heavier_layer", "eager_sync"],
            "assembly": ["slow_detokenize", "rerun_check", "verbose_logging"],
        },
    }[half]
    sizes = {"tuning": (64, 128), "blind": (96, 160)}[half]
    counts = {"tuning": (60, 120, 300), "blind": (80, 200, 500)}[half]
    per_stage = 5
    pairs: list[Pair] = []
    for stage, kinds in variants.items():
        for j in range(per_stage):
            kind = kinds[j % len(kinds)]
            mag = rng.choice((0.5, 1.0, 2.0))
            base = Run(
                d_model=rng.choice(sizes),
                requests=rng.choice(counts),
                rate_per_s=rng.choice((150.0, 250.0)),
                seed=rng.randrange(1 << 30),
            )
            if kind == "static_shapes":
                base = replace(base, requests=max(base.requests, 80), drift_from=base.requests // 3)
            fail = replace(base, fault=kind, magnitude=mag, seed=rng.randrange(1 << 30))
            s, m = TRUTH[kind]
            pairs.append(Pair(f"{half}-{stage}-{j}-{kind}", half, kind, s, m, fail, base))
    for j in range(per_stage):
        base = Run(
            d_model=rng.choice(sizes),
            requests=rng.choice(counts),
            rate_per_s=rng.choice((150.0, 250.0)),
            seed=rng.randrange(1 << 30),
        )
        other = replace(base, seed=rng.randrange(1 << 30))
        pairs.append(Pair(f"{half}-aa-{j}", half, "none", "none", "none", other, base))
    return pairs


def fixture_pairs() -> list[Pair]:
    """The pairs tests/fixtures/real_pairs holds: burstier arrivals at the same rate, a graph
    break of another kind and size than any tuning pair's, and a recompile storm where a
    handful of ~80 requests recompile."""
    gb = Run(d_model=96, requests=150, rate_per_s=200.0, seed=4242)
    storm = Run(d_model=64, requests=80, rate_per_s=100.0, seed=5151, drift_from=58)
    bursty = Run(d_model=64, requests=150, rate_per_s=200.0, seed=6161)
    return [
        Pair("fixture-bursty_arrivals", "fixtures", "bursty_arrivals", *TRUTH["bursty_arrivals"],
             replace(bursty, fault="bursty_arrivals", magnitude=1.0, seed=6162), bursty),
        Pair("fixture-break_print", "fixtures", "break_print", *TRUTH["break_print"],
             replace(gb, fault="break_print", seed=4243), gb),
        Pair("fixture-recompile_storm", "fixtures", "static_shapes", *TRUTH["static_shapes"],
             replace(storm, fault="static_shapes", seed=5152), storm),
    ]  # fmt: skip


_MARK = "@@corpus-worker@@ "


def _start(run: Run, stem: str, work: Path, nice: int) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.update(
        TORCH_TRACE=str(work / f"{stem}.torch_trace_raw"),
        # One cache per model configuration, as a deployed service keeps one.
        TORCHINDUCTOR_CACHE_DIR=str(work / f"inductor_{run.d_model}_{run.fault}"),
        TORCHINDUCTOR_COMPILE_THREADS="1",
        PYTHONHASHSEED="0",
    )
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           str(work / f"{stem}.pt.trace.json"), "--run", json.dumps(asdict(run)),
           "--autogroup-nice", str(nice)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    _await(proc, "ready", stem)  # warmed up before the other run starts compiling
    return proc


def _await(proc: subprocess.Popen[str], word: str, stem: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(_MARK):
            if line.removeprefix(_MARK).strip() == word:
                return
            break
    raise SystemExit(f"{stem}: the worker ended before saying {word!r} (exit {proc.wait()})")


def record_pair(pair: Pair, out: Path, work: Path, nice: int) -> None:
    """Record both runs of a pair in alternating blocks of requests (ABBA), so that whatever
    else the machine does drifts over both runs alike instead of landing on one of them."""
    runs = {"failing": pair.failing, "comparator": pair.comparator}
    procs = {role: _start(run, f"{pair.pair_id}.{role}", work, nice) for role, run in runs.items()}
    order = list(procs)
    n_blocks = len(blocks(pair.failing.requests))
    if len(blocks(pair.comparator.requests)) != n_blocks:
        raise SystemExit(f"{pair.pair_id}: both runs must serve as many blocks")
    for b in range(n_blocks):
        for role in order if b % 2 == 0 else order[::-1]:
            proc = procs[role]
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _await(proc, "done", f"{pair.pair_id}.{role}")
    for role, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{pair.pair_id}.{role}: the worker failed (exit {proc.returncode})")
        stem = f"{pair.pair_id}.{role}"
        keep_recording(stem, work / f"{stem}.pt.trace.json", work / f"{stem}.torch_trace_raw", out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=False)
    parser.add_argument("--half", action="append", choices=("tuning", "blind", "fixtures"))
    parser.add_argument("--only", action="append", help="record only pairs whose id holds this")
    parser.add_argument("--nice", type=int, default=0, help="autogroup niceness (root; e.g. -20)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--autogroup-nice", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        if args.autogroup_nice:
            Path("/proc/self/autogroup").write_text(f"{args.autogroup_nice}\n")
        raw = json.loads(args.run)
        raw["seqs"] = tuple(raw["seqs"])
        serve(Run(**raw), args.worker)
        return
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"pairs": []}
    done = {p["pair_id"] for p in manifest["pairs"]}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="corpus_") as tmp:
        for half in args.half or ["tuning", "blind"]:
            for pair in fixture_pairs() if half == "fixtures" else plan(half):
                if pair.pair_id in done or (
                    args.only and not any(o in pair.pair_id for o in args.only)
                ):
                    continue
                record_pair(pair, args.out, Path(tmp), args.nice)
                manifest["pairs"].append(asdict(pair))
                manifest_path.write_text(json.dumps(manifest, indent=1))
                print(f"{time.perf_counter() - t0:7.1f}s  {pair.pair_id}", flush=True)


if __name__ == "__main__":
    main()
