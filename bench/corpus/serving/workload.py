"""The seeded workload of a run (prompts, output lengths, Poisson arrival gaps) and the request
as the engine tracks and measures it (epoch microseconds, time.time_ns() / 1000)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .faults import RunConfig
from .text import Detokenizer, lexicon, prompt_text


@dataclass
class Request:
    """One request: what it asks for, its engine state, and what the loop measured."""

    rid: str
    text: str
    max_tokens: int
    offset_s: float  # arrival time after its segment starts
    segment: int
    arrival_us: float = 0.0
    prompt: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    computed: int = 0  # tokens of prompt + outputs whose KV is in the cache
    blocks: list[int] = field(default_factory=list)
    first_scheduled_us: float | None = None
    token_us: list[float] = field(default_factory=list)
    finish_us: float | None = None
    preemptions: int = 0
    steps: list[int] = field(default_factory=list)
    detok: Detokenizer | None = None
    streamed: list[str] = field(default_factory=list)

    def tokens(self) -> list[int]:
        """Prompt then outputs so far: what a (re)computed prefill covers."""
        return self.prompt + self.outputs


def build(cfg: RunConfig) -> list[Request]:
    """The run's requests in arrival order, split into cfg.segments contiguous segments whose
    arrival offsets restart at 0 (each segment is served in its own ABBA turn)."""
    rng = random.Random(cfg.seed)
    words = lexicon()
    reqs: list[Request] = []
    per_seg = -(-cfg.requests // cfg.segments)
    at = 0.0
    for i in range(cfg.requests):
        seg = i // per_seg
        if i % per_seg == 0:
            at = 0.0
        at += rng.expovariate(cfg.rate_per_s)
        span = cfg.long_words if rng.random() < cfg.long_share else cfg.prompt_words
        text = prompt_text(rng, words, rng.randint(*span))
        out = rng.randint(*cfg.output_tokens)
        reqs.append(Request(f"req-{cfg.seed % 10000:04d}-{i:04d}", text, out, at, seg))
    return reqs
