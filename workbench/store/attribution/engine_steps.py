"""Serving-engine steps as requests: phase, batch size and token count from the step's name.

The name patterns are data (`[[requests.engine_step]]` in the rules file): a pattern's named
groups give `bs` (batch size), `toks*` (token counts, summed) and `phase` (when the rule does
not fix the phase itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workbench.store.attribution.rules import Rules

I64 = npt.NDArray[np.int64]
UNIT = "engine_step"


@dataclass
class StepFacts:
    """Per engine step: phase, batch size and tokens (-1 = not stated), and the shape key."""

    phase: list[str | None]
    batch_size: I64
    tokens: I64

    def keys(self) -> list[str | None]:
        """`decode bs=32 toks=32`: the step's shape, so shape and batch views group by it."""
        out: list[str | None] = []
        for ph, bs, tok in zip(self.phase, self.batch_size.tolist(), self.tokens.tolist(),
                               strict=True):  # fmt: skip
            parts = [ph or "step"]
            if bs >= 0:
                parts.append(f"bs={bs}")
            if tok >= 0:
                parts.append(f"toks={tok}")
            out.append(" ".join(parts))
        return out


def is_step(rules: Rules, name: str | None) -> bool:
    """True when the name is an engine step by some rule."""
    return any(s.name.search(name or "") for s in rules.engine_steps)


def step_facts(rules: Rules, names: list[str]) -> StepFacts:
    """Phase, batch size and token count of each step, by the first rule matching its name."""
    n = len(names)
    phase: list[str | None] = [None] * n
    bs = np.full(n, -1, dtype=np.int64)
    toks = np.full(n, -1, dtype=np.int64)
    for i, name in enumerate(names):
        for step in rules.engine_steps:
            m = step.name.search(name or "")
            if m is None:
                continue
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            phase[i] = step.phase or (groups.get("phase") or "").lower() or None
            if "bs" in groups:
                bs[i] = int(groups["bs"])
            counts = [int(v) for k, v in groups.items() if k.startswith("toks")]
            if counts:
                toks[i] = sum(counts)
            break
    return StepFacts(phase, bs, toks)


def workload(keys: list[str | None], most: int = 3) -> str:
    """The runs row's workload for a run of engine steps: its commonest step shapes."""
    counts: dict[str, int] = {}
    for k in keys:
        counts[k or "step"] = counts.get(k or "step", 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} x{c}" for k, c in top[:most])
    if len(top) > most:
        text += f", {len(top) - most} more shapes"
    return f"engine steps: {text}"
