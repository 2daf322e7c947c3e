"""The continuous-batching engine loop: tokenize arrivals, schedule (chunked prefill under a
token budget, KV blocks, preemption by recompute), forward, sample, detokenize and stream.
Each phase is a record_function span named as SERVING_SPEC.md says."""

from __future__ import annotations

import time
from collections import deque

import torch
from torch.profiler import record_function

from .faults import RunConfig
from .model import KVPool, StepBatch, TinyLM, forward
from .text import Detokenizer, Tokenizer
from .workload import Request

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MAX_PREFILL = 2048  # tokens of one prefill-only step when chunked prefill is off


def now_us() -> float:
    return time.time_ns() / 1000.0


def _bucket(n: int) -> int:
    return next(b for b in BUCKETS if b >= n)


class Engine:
    """One engine (one thread): waiting queue, running list in admission order, KV pool."""

    def __init__(self, cfg: RunConfig) -> None:
        torch.manual_seed(cfg.seed)
        # One intra-op thread: with two, OpenMP workers fight the profiler on 2 cores.
        torch.set_num_threads(1)
        torch._dynamo.config.recompile_limit = 256
        torch._dynamo.config.accumulated_recompile_limit = 4096
        self.cfg = cfg
        self.tok = Tokenizer(slow=cfg.slow_tokenizer)
        self.detok_tok = Tokenizer()
        self.model = TinyLM(cfg.d_model, cfg.layers, cfg.heads, self.tok.vocab_size).eval()
        self.pool = KVPool(
            cfg.kv_blocks, cfg.block_size, cfg.layers, cfg.heads, cfg.d_model // cfg.heads
        )
        # Static shapes: every batch size it sees is its own graph. The bucketed engine pads the
        # sampled rows to BUCKETS, so it only ever sees those (compiled at warm-up).
        self.head = torch.compile(self.model.head, backend="eager", dynamic=False)
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.step_no = 0
        self.done: list[Request] = []

    def warm_up(self) -> None:
        """Compile the head for each bucket before the profiler starts (both runs alike)."""
        with torch.no_grad():
            for b in BUCKETS:
                self.head(torch.zeros(b, self.cfg.d_model))

    # ------------------------------------------------------------------ the loop

    def serve(self, reqs: list[Request]) -> None:
        """Serve one segment: its requests arrive open-loop at start + offset; return drained."""
        start = now_us()
        for r in reqs:
            r.arrival_us = start + r.offset_s * 1e6
        pending = deque(reqs)
        with torch.no_grad():
            while pending or self.waiting or self.running:
                if not self.waiting and not self.running:
                    wait = pending[0].arrival_us - now_us()
                    if wait > 0:
                        time.sleep(wait / 1e6)  # idle between steps: no llm.* span
                        continue
                self.step(pending)

    def step(self, pending: deque[Request]) -> None:
        k = self.step_no
        self.step_no += 1
        with record_function(f"llm.step#{k}"):
            t = now_us()
            while pending and pending[0].arrival_us <= t:
                r = pending.popleft()
                with record_function(f"llm.tokenize#{r.rid}"):
                    r.prompt = self.tok.encode(r.text)
                    r.detok = Detokenizer(self.detok_tok, r.prompt, self.cfg.slow_detokenizer)
                self.waiting.append(r)
            with record_function("llm.schedule"):
                members, victims = self.schedule()
                t = now_us()
                for r, a, b in members:
                    if r.first_scheduled_us is None:
                        r.first_scheduled_us = t
                    r.steps.append(k)
                    kind = "decode" if b - a == 1 and a >= len(r.prompt) else f"prefill {a}:{b}"
                    with record_function(f"llm.seq#{r.rid} {kind}"):
                        pass
            for r in victims:
                with record_function(f"llm.preempt#{r.rid}"):
                    self.preempt(r)
            if not members:
                return
            with record_function("llm.forward"):
                batch, samplers = self.batch(members)
                hidden = forward(self.model, self.pool, batch, self.cfg.heavy_decode)
                s = hidden.shape[0]
                if s and self.cfg.pad_batches:
                    hidden = torch.cat([hidden, hidden.new_zeros(_bucket(s) - s, hidden.shape[1])])
                logits = self.head(hidden)[:s] if s else hidden
            with record_function("llm.sample"):
                if s:
                    probs = torch.softmax(logits / 0.8, dim=-1)
                    new = torch.multinomial(probs, 1, generator=self.gen)[:, 0].tolist()
                else:
                    new = []
            for r, _, b in members:
                r.computed = b
            with record_function("llm.detokenize"):
                self.emit(samplers, new)

    # ------------------------------------------------------------------ scheduling

    def _alloc(self, r: Request, upto: int) -> bool:
        need = -(-upto // self.cfg.block_size) - len(r.blocks)
        if need > len(self.pool.free):
            return False
        for _ in range(max(need, 0)):
            r.blocks.append(self.pool.free.pop())
        return True

    def _evict_youngest(self, victims: list[Request]) -> Request:
        v = self.running.pop()
        self.pool.free.extend(v.blocks)
        victims.append(v)
        return v

    def schedule(self) -> tuple[list[tuple[Request, int, int]], list[Request]]:
        """This step's members (request, first token, end token) and the evicted sequences."""
        if not self.cfg.chunked_prefill:
            return self._schedule_unchunked()
        budget = self.cfg.token_budget
        members: list[tuple[Request, int, int]] = []
        victims: list[Request] = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(len(r.tokens()) - r.computed, budget)
            while not self._alloc(r, r.computed + n):
                if self._evict_youngest(victims) is r:
                    break
            if r in victims:
                break
            members.append((r, r.computed, r.computed + n))
            budget -= n
            i += 1
        if not victims:
            self._admit(members, budget, chunk=True)
        return members, victims

    def _admit(self, members: list[tuple[Request, int, int]], budget: int, chunk: bool) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_seqs:
            r = self.waiting[0]
            need = len(r.tokens())
            if need > budget and not chunk:
                break
            if -(-(need + r.max_tokens) // self.cfg.block_size) > self.pool.total:
                raise SystemExit(f"{r.rid}: {need} tokens never fit {self.pool.total} KV blocks")
            n = min(need, budget)
            if not self._alloc(r, n):
                break
            self.waiting.popleft()
            self.running.append(r)
            members.append((r, 0, n))
            budget -= n

    def _schedule_unchunked(self) -> tuple[list[tuple[Request, int, int]], list[Request]]:
        # Whole prompts in prefill-only steps first; the running decodes wait for them.
        members: list[tuple[Request, int, int]] = []
        victims: list[Request] = []
        self._admit(members, MAX_PREFILL, chunk=False)
        if members:
            return members, victims
        for r in list(self.running):
            if r in victims:
                break
            while not self._alloc(r, r.computed + 1):
                if self._evict_youngest(victims) is r:
                    break
            if r not in victims:
                members.append((r, r.computed, r.computed + 1))
        return members, victims

    def preempt(self, r: Request) -> None:
        """Evicted: its KV is dropped (blocks freed in schedule, cleared here); it recomputes."""
        self.pool.clear(r.blocks)
        r.blocks = []
        r.computed = 0
        r.preemptions += 1
        self.waiting.appendleft(r)

    # ------------------------------------------------------------------ model inputs, output

    def batch(self, members: list[tuple[Request, int, int]]) -> tuple[StepBatch, list[Request]]:
        """The flat model input, decode members first; the requests that sample, in row order."""
        bs = self.cfg.block_size

        def slots(r: Request, a: int, b: int) -> list[int]:
            return [r.blocks[p // bs] * bs + p % bs for p in range(a, b)]

        dec = [(r, a, b) for r, a, b in members if b - a == 1 and a >= len(r.prompt)]
        pre = [(r, a, b) for r, a, b in members if not (b - a == 1 and a >= len(r.prompt))]
        toks: list[int] = []
        pos: list[int] = []
        sl: list[int] = []
        sample_rows: list[int] = []
        samplers: list[Request] = []
        for r, a, b in dec + pre:
            all_t = r.tokens()
            toks.extend(all_t[a:b])
            pos.extend(range(a, b))
            sl.extend(slots(r, a, b))
            if b == len(all_t):
                sample_rows.append(len(toks) - 1)
                samplers.append(r)
        tmax = max((b for _, _, b in dec), default=1)
        ctx_rows: list[int] = []
        lens: list[int] = []
        for r, _, b in dec:
            ctx_rows.extend(slots(r, 0, b) + [0] * (tmax - b))
            lens.append(b)
        bias = torch.zeros(len(dec), tmax)
        if dec:
            pad = torch.arange(tmax)[None, :] >= torch.tensor(lens)[:, None]
            bias.masked_fill_(pad, float("-inf"))
        prefills: list[tuple[int, torch.Tensor, torch.Tensor | None]] = []
        for r, a, b in pre:
            pbias = None
            if a > 0:  # a later chunk: causal, offset by the a tokens already cached
                pbias = torch.zeros(b - a, b).masked_fill_(
                    torch.ones(b - a, b, dtype=torch.bool).triu(a + 1), float("-inf")
                )
            prefills.append((b - a, torch.tensor(slots(r, 0, b)), pbias))
        # One tensor for all the integer inputs (fewer ops per step in the trace), then views.
        flat = torch.tensor(toks + pos + sl + ctx_rows + sample_rows, dtype=torch.long)
        n, nc = len(toks), len(ctx_rows)
        batch = StepBatch(
            tokens=flat[:n],
            positions=flat[n : 2 * n],
            slots=flat[2 * n : 3 * n],
            n_dec=len(dec),
            dec_ctx=flat[3 * n : 3 * n + nc].view(len(dec), tmax),
            dec_bias=bias[:, None, None, :],
            prefills=prefills,
            sample_rows=flat[3 * n + nc :],
        )
        return batch, samplers

    def emit(self, samplers: list[Request], new: list[int]) -> None:
        """Append each new token, stream its text, finish at the output length; the emission
        time is taken last, so it is the end of the detokenize phase."""
        finished: list[Request] = []
        for r, t in zip(samplers, new, strict=True):
            r.outputs.append(t)
            assert r.detok is not None
            r.streamed.append(r.detok.add(t))
            if len(r.outputs) >= r.max_tokens:
                finished.append(r)
        for r in finished:
            self.running.remove(r)
            self.pool.free.extend(r.blocks)
            r.blocks = []
            self.done.append(r)
        t_emit = now_us()
        for r in samplers:
            r.token_us.append(t_emit)
        for r in finished:
            r.finish_us = t_emit
