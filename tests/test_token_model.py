"""The token model (SERVING_SPEC): engine steps from `llm.*` annotations, the join of records to
them, and each gap split into stages, checked against splits worked out by hand."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from workbench.sample.llm import RECORDED_PAIR
from workbench.store import schema
from workbench.store.attribution.rules import DEFAULT_RULES, load_rules
from workbench.store.attribution.trace_import import attribute
from workbench.store.importers import importer_for
from workbench.store.serving import otlp
from workbench.store.serving.engine_trace import engine_steps, stalled_decodes, step_table
from workbench.store.serving.join import join
from workbench.store.serving.records import ServingRecord, ServingRecords
from workbench.store.serving.token_model import token_tables

STAGES = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us", "other_us"]
BASE = 1_700_000_000_000_000.0  # epoch us of the trace's ts 0


def events(rows: list[tuple[Any, ...]]) -> pa.Table:
    """(name, ts, dur[, stage[, pid, tid[, category]]]) rows as an events table."""
    full = [(*r, *(None, 1, 1, "user_annotation")[len(r) - 3 :]) for r in rows]
    return pa.table(
        {
            "name": pa.array([r[0] for r in full], pa.string()),
            "ts_us": pa.array([float(r[1]) for r in full], pa.float64()),
            "dur_us": pa.array([float(r[2]) for r in full], pa.float64()),
            "stage": pa.array([r[3] for r in full], pa.string()),
            "pid": pa.array([r[4] for r in full], pa.int64()),
            "tid": pa.array([r[5] for r in full], pa.int64()),
            "category": pa.array([r[6] for r in full], pa.string()),
        }
    )


# Three steps. A: prompt 8 chunked over steps 0 and 1, first token at step 1, decodes in step 2.
# B: prefill in step 0, decodes in step 1, is preempted in step 2. Step 0 tokenizes both and
# its forward holds a torch.compile (lowering) event; step 1's forward runs compiled code
# (a compiled region: the forward itself, not compiling).
HAND = [
    ("llm.step#0", 10, 40),
    ("llm.tokenize#A", 10, 2),
    ("llm.tokenize#B", 12, 2),
    ("llm.schedule", 14, 6),
    ("llm.seq#A prefill 0:4", 15, 1),
    ("llm.seq#B prefill 0:2", 16, 1),
    ("llm.forward", 20, 20),
    ("entire_frame_compile", 22, 8, "lowering"),
    ("aten::mm", 31, 3, "execution"),
    ("llm.sample", 40, 2),
    ("llm.detokenize", 42, 4),
    ("llm.step#1", 60, 40),
    ("llm.schedule", 60, 5),
    ("llm.seq#A prefill 4:8", 61, 1),
    ("llm.seq#B decode", 62, 1),
    ("llm.forward", 65, 25),
    ("Torch-Compiled Region: 0/0", 66, 20, "lowering"),
    ("llm.sample", 90, 2),
    ("llm.detokenize", 92, 6),
    ("llm.step#2", 110, 30),
    ("llm.schedule", 110, 4),
    ("llm.seq#A decode", 111, 1),
    ("llm.preempt#B", 114, 2),
    ("llm.forward", 116, 14),
    ("llm.sample", 130, 2),
    ("llm.detokenize", 132, 6),
    # Not the engine thread: a kernel, a compile on another thread, the GPU copy of a step.
    ("gemm_kernel", 66, 20, "execution", 0, 7, "kernel"),
    ("dynamo", 100, 50, "lowering", 1, 2, "cpu_op"),
    ("llm.step#0", 11, 30, None, 0, 7, "gpu_user_annotation"),
]


def rec(rid: str, arrival: float, tokens: list[float], end: float, **kw: Any) -> ServingRecord:
    return ServingRecord(rid, arrival, end, tokens, kw.pop("inp", 8), len(tokens), **kw)


def hand_records(base: float = BASE, clock: str = "epoch") -> ServingRecords:
    return ServingRecords(
        [
            rec("A", base + 0, [base + 98, base + 138], base + 139, inp=8),
            rec("B", base + 5, [base + 46, base + 98], base + 150, inp=2, preemptions=0),
        ],
        clock,
        "test",
    )


def split(row: dict[str, Any]) -> list[float]:
    return [row[s] for s in STAGES]


def test_hand_built_steps() -> None:
    steps = engine_steps(events(HAND))
    assert steps is not None and (steps.pid, steps.tid) == (1, 1)
    t = step_table(steps).to_pylist()
    assert [r["step"] for r in t] == [0, 1, 2]
    assert [(r["start_us"], r["end_us"]) for r in t] == [(10, 50), (60, 100), (110, 140)]
    assert [r["prefill_tokens"] for r in t] == [6, 4, 0]
    assert [(r["n_prefill"], r["n_decode"]) for r in t] == [(2, 0), (1, 1), (0, 1)]
    assert [r["tokenize_us"] for r in t] == [4, 0, 0]
    assert [r["schedule_us"] for r in t] == [6, 5, 4]
    assert [r["preempt_us"] for r in t] == [0, 0, 2]
    assert [r["forward_us"] for r in t] == [20, 25, 14]
    assert [r["detokenize_us"] for r in t] == [4, 6, 6]
    assert [r["compile_us"] for r in t] == [8, 0, 0]
    assert [r["preemptions"] for r in t] == [0, 0, 1]
    assert [r["members"] for r in t] == [["A", "B"], ["A", "B"], ["A"]]
    assert steps.tokenize_request.tolist() == ["A", "B"]
    # The innermost span wins: compile inside forward is lowering, idle in/between steps other.
    segs = list(
        zip(steps.seg_start.tolist(), steps.seg_end.tolist(), steps.seg_stage.tolist(), strict=True)
    )
    assert segs[:6] == [(10, 14, 0), (14, 20, 2), (20, 22, 3), (22, 30, 1), (30, 42, 3),
                        (42, 46, 4)]  # fmt: skip
    assert segs[6] == (46, 60, 5) and segs[-1] == (138, 140, 5)
    # Step 1's compiled region is execution, like the forward around it.
    assert (65, 92, 3) in segs  # forward and sample, the compiled region inside them too


def test_stalled_decodes_are_counted_per_step() -> None:
    """A prefill-only step that leaves a mid-decode request out stalls it; chunked steps that
    carry every decode, and requests before their first or after their last decode, do not."""
    rows: list[tuple[Any, ...]] = []
    plan = [  # per step: members (request, role)
        [("A", "prefill 0:4")],
        [("A", "decode"), ("B", "prefill 0:4")],
        [("C", "prefill 0:64")],  # A and B mid-decode? only A has decoded: A stalls
        [("A", "decode"), ("B", "decode")],
        [("D", "prefill 0:64")],  # A, B both mid-decode and left out
        [("A", "decode"), ("B", "decode"), ("C", "decode")],
        [("B", "decode")],  # A finished at step 5; C has one decode only: no interval
    ]
    for k, members in enumerate(plan):
        t = 100.0 * k
        rows.append((f"llm.step#{k}", t, 50))
        for j, (rid, role) in enumerate(members):
            rows.append((f"llm.seq#{rid} {role}", t + 1 + j, 0.5))
        rows.append(("llm.forward", t + 10, 20))
    steps = engine_steps(events(rows))
    assert steps is not None
    assert stalled_decodes(steps).tolist() == [0, 0, 1, 0, 2, 0, 0]


def test_hand_built_split() -> None:
    steps = engine_steps(events(HAND))
    joined = join(hand_records(), steps, BASE)
    assert (joined.method, joined.matched, joined.warnings) == ("request_id", 2, [])
    requests, tokens = token_tables(joined)
    assert requests.schema == schema.REQUESTS_FILE and tokens.schema == schema.TOKENS_FILE
    tok = {(r["request_id"], r["token"]): r for r in tokens.to_pylist()}
    # A token 0, [0, 98]: 10 waiting to be admitted (ingress); step 0 as a member: 4 of
    # tokenizing (ingress), 6 schedule, 2+10+2 forward/sample, 8 compile, 4 detokenize, 4 idle;
    # [50, 60] between steps (scheduling); step 1 up to its detokenize end: 5, 27, 6.
    a0 = tok[("A", 0)]
    assert (a0["ts_us"], a0["gap_us"], a0["step"]) == (98, 98, 1)
    assert split(a0) == pytest.approx([14, 8, 21, 41, 10, 4])
    # A token 1, [98, 138]: step 1's idle 2, [100, 110] between steps, step 2 to detokenize.
    a1 = tok[("A", 1)]
    assert (a1["gap_us"], a1["step"]) == (40, 2)
    assert split(a1) == pytest.approx([0, 0, 16, 16, 6, 2])
    # B token 0, [5, 46]: 5 waiting, then step 0 as a member up to its detokenize end.
    b0 = tok[("B", 0)]
    assert (b0["gap_us"], b0["step"]) == (41, 0)
    assert split(b0) == pytest.approx([9, 8, 6, 14, 4, 0])
    b1 = tok[("B", 1)]
    assert (b1["gap_us"], b1["step"]) == (52, 1)
    assert split(b1) == pytest.approx([0, 0, 15, 27, 6, 4])

    req = {r["request_id"]: r for r in requests.to_pylist()}
    ra, rb = req["A"], req["B"]
    # A's tail [138, 139] is step 2's idle; B's tail [98, 150]: 2 idle of step 1, then preempted.
    assert split(ra) == pytest.approx([14, 8, 37, 57, 16, 7])
    assert split(rb) == pytest.approx([9, 8, 71, 41, 10, 6])
    assert (ra["arrival_us"], ra["start_us"], ra["end_us"], ra["latency_us"]) == (0, 10, 139, 139)
    assert (rb["queue_us"], ra["queue_us"]) == (5, 10)
    assert (ra["ttft_us"], ra["tpot_us"], rb["ttft_us"], rb["tpot_us"]) == (98, 40, 41, 52)
    assert (ra["steps"], rb["steps"]) == ([0, 1, 2], [0, 1])
    assert (ra["batch_size"], rb["batch_size"]) == (2, 2)  # mean of 2, 2, 1 members; 2, 2
    assert (ra["preemptions"], rb["preemptions"]) == (0, 1)  # B's record said 0; the trace 1
    assert (ra["shape_key"], rb["shape_key"]) == ("in=8 out=2", "in=2 out=2")
    assert ra["name"] == "llm_request" and ra["ok"] is True


def test_late_tokenize_is_ingress() -> None:
    """A request tokenized after its admission, in a step it is not a member of: ingress."""
    rows = [
        ("llm.step#0", 0, 10),
        ("llm.schedule", 0, 2),
        ("llm.seq#A prefill 0:1", 0, 1),
        ("llm.forward", 2, 6),
        ("llm.detokenize", 8, 2),
        ("llm.step#1", 10, 10),
        ("llm.tokenize#A", 10, 3),
        ("llm.forward", 13, 5),
        ("llm.step#2", 20, 10),
        ("llm.schedule", 20, 2),
        ("llm.seq#A decode", 20, 1),
        ("llm.forward", 22, 6),
        ("llm.detokenize", 28, 2),
    ]
    recs = ServingRecords([rec("A", 0, [10, 30], 30)], "relative", "test")
    joined = join(recs, engine_steps(events(rows)), 0.0)
    tok = token_tables(joined)[1].to_pylist()
    # [10, 30]: own tokenize 3 (ingress), rest of step 1 non-member 7, then step 2 as a member.
    assert split(tok[1]) == pytest.approx([3, 0, 9, 6, 2, 0])


def _random_trace(rng: random.Random, n_req: int) -> tuple[list[tuple[Any, ...]], ServingRecords]:
    """A serving loop simulated: arrivals, chunked prefill, decode, preemptions, compiles."""
    rows: list[tuple[Any, ...]] = []
    arrivals = sorted(rng.uniform(0, 2000) for _ in range(n_req))
    prompt = [rng.randint(1, 40) for _ in range(n_req)]
    want = [rng.randint(1, 6) for _ in range(n_req)]
    done = [0] * n_req
    tokens: list[list[float]] = [[] for _ in range(n_req)]
    ends = [0.0] * n_req
    tokenized = [False] * n_req
    t, k = 0.0, 0
    finished: set[int] = set()
    while len(finished) < n_req:
        ready = [i for i in range(n_req) if arrivals[i] <= t and i not in finished]
        if not ready:
            t = min(arrivals[i] for i in range(n_req) if i not in finished) + rng.uniform(0, 5)
            continue
        start = t
        rows.append(("STEP", start))
        for i in ready:
            if not tokenized[i]:
                d = rng.uniform(0.5, 3)
                rows.append((f"llm.tokenize#r{i}", t, d))
                tokenized[i] = True
                t += d
        members = [i for i in ready if rng.random() < 0.8]
        s0 = t
        t += rng.uniform(0.1, 0.5)
        chunk: dict[int, int] = {}
        for i in members:
            if done[i] < prompt[i]:
                b = min(prompt[i], done[i] + rng.randint(1, 20))
                rows.append((f"llm.seq#r{i} prefill {done[i]}:{b}", t, 0.05))
                chunk[i] = b
            else:
                rows.append((f"llm.seq#r{i} decode", t, 0.05))
            t += 0.1
        rows.append(("llm.schedule", s0, t - s0))
        if members and rng.random() < 0.2:
            victim = members.pop(rng.randrange(len(members)))
            rows.append((f"llm.preempt#r{victim}", t, 1.0))
            chunk.pop(victim, None)
            done[victim] = 0
            t += 1.0
        f = rng.uniform(5, 20)
        rows.append(("llm.forward", t, f))
        if rng.random() < 0.3:
            rows.append(("entire_frame_compile", t + 1, f / 2, "lowering"))
            rows.append(("compile_attempt_0", t + 1.5, f / 4, "lowering"))
        t += f
        rows.append(("llm.sample", t, 1.0))
        t += 1.0
        d = rng.uniform(0.5, 2)
        rows.append(("llm.detokenize", t, d))
        t += d
        for i in members:
            if i in chunk:
                done[i] = chunk[i]
                if done[i] < prompt[i]:
                    continue
            tokens[i].append(t)
            if len(tokens[i]) >= want[i]:
                finished.add(i)
                ends[i] = t + rng.uniform(0, 3)
        t += rng.uniform(0, 2)
        rows.append(("END", k, start, t))
        k += 1
        t += rng.uniform(0, 4)
    out: list[tuple[Any, ...]] = []
    for r in rows:
        if r[0] == "END":
            out.append((f"llm.step#{r[1]}", r[2], r[3] - r[2]))
        elif r[0] != "STEP":
            out.append(r)
    recs = [
        ServingRecord(f"r{i}", arrivals[i], ends[i], tokens[i], prompt[i], len(tokens[i]))
        for i in range(n_req)
    ]
    return out, ServingRecords(recs, "relative", "test")


@pytest.mark.parametrize("seed", range(5))
def test_stages_sum_to_gaps(seed: int) -> None:
    rows, recs = _random_trace(random.Random(seed), 60)
    steps = engine_steps(events(rows))
    assert steps is not None
    # The simulated records are on the trace clock: put them on an epoch clock 1 s on.
    on_epoch = [
        ServingRecord(r.request_id, r.arrival_us + 1e6, r.end_us + 1e6,
                      [t + 1e6 for t in r.token_us], r.input_tokens, r.output_tokens)
        for r in recs.records
    ]  # fmt: skip
    joined = join(ServingRecords(on_epoch, "epoch", "test"), steps, 1e6)
    assert joined.warnings == []
    assert (joined.method, joined.matched) == ("request_id", 60)
    requests, tokens = token_tables(joined)
    gap = tokens.column("gap_us").to_numpy()
    parts = np.stack([tokens.column(s).to_numpy() for s in STAGES])
    assert (parts >= -1e-9).all()
    np.testing.assert_allclose(parts.sum(axis=0), gap, rtol=1e-9, atol=1e-9)
    lat = requests.column("latency_us").to_numpy()
    rparts = np.stack([requests.column(s).to_numpy() for s in STAGES])
    np.testing.assert_allclose(rparts.sum(axis=0), lat, rtol=1e-9, atol=1e-9)
    # Every token is emitted by a step its request was a member of.
    assert tokens.column("step").null_count == 0
    # Lowering only where the compile events were, and some time is in each stage.
    assert rparts.sum(axis=1).min() > 0
    total = float(sum(r.end_us - r.arrival_us for r in recs.records))
    assert rparts.sum() == pytest.approx(total)


def test_id_join_counts() -> None:
    rows = [*HAND, ("llm.seq#Z decode", 112, 1)]
    recs = hand_records()
    recs.records.append(rec("C", BASE + 1, [BASE + 5], BASE + 6, queue_us=1.0))
    joined = join(recs, engine_steps(events(rows)), BASE)
    assert (joined.method, joined.matched, joined.unmatched_records, joined.unmatched_ids) == (
        "request_id",
        2,
        1,
        1,
    )
    assert joined.warnings == [
        "2 of 3 records matched engine steps by request id",
        "1 request ids in the engine steps have no record",
    ]
    requests, _ = token_tables(joined)
    c = next(r for r in requests.to_pylist() if r["request_id"] == "C")
    # Unmatched: split as records only; the record's queue time is ingress.
    assert split(c) == pytest.approx([1, 0, 0, 0, 0, 4])
    assert c["steps"] is None and c["batch_size"] is None and c["queue_us"] == 1.0
    # Z is a member of step 2 but has no record: step 2 still counts it in A's batch.
    assert next(r for r in requests.to_pylist() if r["request_id"] == "A")["batch_size"] == 2


def test_relative_clock_aligned_with_warning() -> None:
    steps = engine_steps(events(HAND))
    recs = hand_records(base=1000.0, clock="relative")
    joined = join(recs, steps, BASE)
    assert joined.records.records[0].arrival_us == 10.0  # the first step's start
    assert joined.warnings == [
        "records are on a relative clock: aligned so the first arrival falls at the first "
        "engine step's start (10 us on the trace clock)"
    ]
    assert joined.method == "request_id" and joined.matched == 2


def test_records_only() -> None:
    recs = ServingRecords(
        [
            rec("x", 5000.0, [5300.0, 5400.0, 5450.0], 5500.0, queue_us=100.0),
            rec("y", 5100.0, [5150.0], 5200.0, queue_us=80.0),  # queue longer than TTFT
            rec("z", 5200.0, [], 5210.0),
        ],
        "epoch",
        "test",
    )
    joined = join(recs, None, 0.0)
    assert (joined.method, joined.matched, joined.steps) == ("records", 0, None)
    requests, tokens = token_tables(joined)
    tok = tokens.to_pylist()
    assert [(r["request_id"], r["token"], r["ts_us"], r["gap_us"]) for r in tok] == [
        ("x", 0, 300.0, 300.0),
        ("x", 1, 400.0, 100.0),
        ("x", 2, 450.0, 50.0),
        ("y", 0, 150.0, 50.0),
    ]
    assert [split(r) for r in tok] == [
        [100, 0, 0, 0, 0, 200],
        [0, 0, 0, 0, 0, 100],
        [0, 0, 0, 0, 0, 50],
        [50, 0, 0, 0, 0, 0],
    ]
    assert tokens.column("step").null_count == 4
    req = {r["request_id"]: r for r in requests.to_pylist()}
    assert req["x"]["arrival_us"] == 0 and req["x"]["start_us"] == 100.0
    assert (req["x"]["ttft_us"], req["x"]["tpot_us"]) == (300.0, 75.0)
    assert req["y"]["tpot_us"] is None and req["z"]["ttft_us"] is None
    assert split(req["x"]) == [100, 0, 0, 0, 0, 400]
    assert split(req["z"]) == [0, 0, 0, 0, 0, 10]
    assert req["x"]["batch_size"] is None and req["x"]["steps"] is None


def test_no_steps_in_trace() -> None:
    assert engine_steps(events([("aten::mm", 0, 5, "execution")])) is None
    assert engine_steps(events([("llm.forward", 0, 5)])) is None


PAIRS = Path(__file__).parent / "fixtures" / "serving_pairs"


def _real_runs() -> list[Path]:
    """Recorded runs with both files, the preemption fault's failing run first (its trace
    holds llm.preempt spans)."""
    found = [*PAIRS.rglob("otlp.json"), *RECORDED_PAIR.rglob("otlp.json")]
    runs = [p.parent for p in found if (p.parent / "trace.json.gz").is_file()]
    return sorted(runs, key=lambda p: (p != RECORDED_PAIR / "failing", p))


def _decoded_events(trace: Path) -> tuple[pa.Table, float]:
    """The trace's events as ingest attributes them, and the epoch us of their ts 0."""
    dec = importer_for(trace).open(trace, None, None).decode()
    att = attribute(dec.cols, dec.args, load_rules(DEFAULT_RULES), None)
    return att.events, float(dec.cols.ts.min()) + dec.base_us


@pytest.mark.skipif(not _real_runs(), reason="no recorded serving pairs yet")
def test_real_trace_joins_by_id() -> None:
    run = _real_runs()[0]
    ev, base_us = _decoded_events(run / "trace.json.gz")
    steps = engine_steps(ev)
    assert steps is not None and steps.n > 0
    recs = otlp.read(run / "otlp.json")
    joined = join(recs, steps, base_us)
    n = len(recs.records)
    assert (joined.method, joined.matched, joined.unmatched_ids) == ("request_id", n, 0)
    assert not any("overlap" in w for w in joined.warnings)
    requests, tokens = token_tables(joined)
    gap = tokens.column("gap_us").to_numpy()
    parts = np.stack([tokens.column(s).to_numpy() for s in STAGES])
    assert (parts >= -1e-6).all()
    np.testing.assert_allclose(parts.sum(axis=0), gap, rtol=1e-6, atol=1e-6)
    rparts = np.stack([requests.column(s).to_numpy() for s in STAGES])
    np.testing.assert_allclose(
        rparts.sum(axis=0), requests.column("latency_us").to_numpy(), rtol=1e-6, atol=1e-6
    )
    # The loop's token times fall in the detokenize spans of steps the request was in.
    assert tokens.column("step").null_count == 0
    assert requests.column("steps").null_count == 0
    assert tokens.num_rows == sum(len(r.token_us) for r in recs.records)
    # The trace's llm.preempt spans are the preemptions the loop counted, request by request.
    spans = dict(zip(requests["request_id"].to_pylist(), requests["preemptions"].to_pylist(),
                     strict=True))  # fmt: skip
    assert spans == {r.request_id: r.preemptions for r in recs.records}
    assert steps.preempt_step.size == sum(r.preemptions or 0 for r in recs.records)


def test_steps_without_members_join_by_time() -> None:
    rows = [r for r in HAND if not str(r[0]).startswith("llm.seq#")]
    joined = join(hand_records(), engine_steps(events(rows)), BASE)
    assert (joined.method, joined.matched) == ("time", 2)
    assert joined.warnings[0].startswith("the engine steps name no members (no llm.seq spans)")
    requests, tokens = token_tables(joined)
    tok = {(r["request_id"], r["token"]): r for r in tokens.to_pylist()}
    # A is taken to join at step 1, which emitted its first token: [0, 60] is queue wait.
    assert split(tok[("A", 0)]) == pytest.approx([60, 0, 5, 27, 6, 0])
    assert split(tok[("B", 0)]) == pytest.approx([9, 8, 6, 14, 4, 0])
    assert [tok[k]["step"] for k in sorted(tok)] == [1, 2, 0, 1]
    req = {r["request_id"]: r for r in requests.to_pylist()}
    assert (req["A"]["steps"], req["A"]["queue_us"]) == ([1, 2], 60)


def test_epoch_records_clock_checks() -> None:
    steps = engine_steps(events(HAND))
    # No trace base time (0.0): aligned as a relative clock would be.
    joined = join(hand_records(), steps, 0.0)
    assert joined.warnings[0].startswith("records are on an epoch clock, no trace base: aligned")
    assert joined.records.records[0].arrival_us == 10.0
    # A base an hour off: the records miss the steps, and the join says so.
    joined = join(hand_records(), steps, BASE - 3.6e9)
    assert joined.matched == 2
    assert joined.warnings == [
        "the records' times do not overlap the engine steps' on the trace clock "
        f"(trace base {BASE - 3.6e9:.0f} us since the epoch): the clocks may disagree"
    ]
