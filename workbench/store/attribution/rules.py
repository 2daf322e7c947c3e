"""The attribution rules file (data): category + name regex -> stage and priority."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from accel.grouping import dense_ids
from accel.stages import STAGE_CODE
from workbench.errors import WorkbenchError

NONE = "none"
DEFAULT_RULES = Path(__file__).resolve().parent / "rules" / "default.toml"

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Rule:
    categories: frozenset[str]
    name: re.Pattern[str]
    stage: str
    priority: int


@dataclass(frozen=True)
class EngineStep:
    """A serving-engine step annotation: name regex (groups bs, toks*, phase), fixed phase."""

    name: re.Pattern[str]
    phase: str | None


@dataclass(frozen=True)
class Rules:
    """A parsed rules file; `sha256` identifies it in the import fingerprint."""

    rules: tuple[Rule, ...]
    annotation_categories: frozenset[str]
    step: re.Pattern[str]
    not_requests: tuple[re.Pattern[str], ...]
    compile_categories: frozenset[str]
    compile_span: re.Pattern[str]
    compile_id: re.Pattern[str]
    compile_region: re.Pattern[str]
    fallback_categories: frozenset[str]
    fallback_op: re.Pattern[str]
    sha256: str
    engine_steps: tuple[EngineStep, ...] = ()
    graph_launch: re.Pattern[str] = re.compile("(?!)")
    queue_wait: re.Pattern[str] = re.compile("(?!)")


def _regex(path: Path, where: str, text: Any) -> re.Pattern[str]:
    if not isinstance(text, str):
        raise WorkbenchError(str(path), f"{where}: expected a regex string")
    try:
        return re.compile(text)
    except re.error as exc:
        raise WorkbenchError(str(path), f"{where}: bad regex {text!r}: {exc}") from exc


def _strings(path: Path, where: str, value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WorkbenchError(str(path), f"{where}: expected a list of strings")
    return frozenset(value)


def load_rules(path: Path = DEFAULT_RULES) -> Rules:
    """Parse and check a rules file; a bad file is a one-line error naming it."""
    try:
        raw = path.read_bytes()
        doc = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise WorkbenchError(str(path), f"cannot read rules file: {exc}") from exc
    rules: list[Rule] = []
    for i, r in enumerate(doc.get("rule", [])):
        where = f"rule {i + 1}"
        stage = r.get("stage")
        if stage != NONE and stage not in STAGE_CODE:
            raise WorkbenchError(str(path), f"{where}: unknown stage {stage!r}")
        prio = r.get("priority", 0)
        if not isinstance(prio, int):
            raise WorkbenchError(str(path), f"{where}: priority must be an integer")
        rules.append(
            Rule(
                _strings(path, where, r.get("categories")),
                _regex(path, where, r.get("name", "")),
                str(stage),
                prio,
            )
        )
    req = doc.get("requests", {})
    comp = doc.get("compile", {})
    return Rules(
        rules=tuple(rules),
        annotation_categories=_strings(path, "requests", req.get("annotation_categories")),
        step=_regex(path, "requests.step", req.get("step", r"^ProfilerStep#\d+$")),
        not_requests=tuple(
            _regex(path, "requests.not_requests", t) for t in req.get("not_requests", [])
        ),
        compile_categories=_strings(path, "compile", comp.get("categories")),
        compile_span=_regex(path, "compile.span", comp.get("span", "(?!)")),
        compile_id=_regex(path, "compile.id", comp.get("id", "(?!)")),
        compile_region=_regex(path, "compile.region", comp.get("region", "(?!)")),
        fallback_categories=_strings(
            path, "compile.fallback_categories", comp.get("fallback_categories")
        ),
        fallback_op=_regex(path, "compile.fallback_op", comp.get("fallback_op", "(?!)")),
        sha256=hashlib.sha256(raw).hexdigest(),
        engine_steps=tuple(_engine_steps(path, req.get("engine_step", []))),
        graph_launch=_regex(path, "graphs.launch", doc.get("graphs", {}).get("launch", "(?!)")),
        queue_wait=_regex(path, "requests.queue_wait", req.get("queue_wait", "(?!)")),
    )


def _engine_steps(path: Path, items: Any) -> list[EngineStep]:
    if not isinstance(items, list):
        raise WorkbenchError(str(path), "requests.engine_step: expected [[requests.engine_step]]")
    out = []
    for i, item in enumerate(items):
        where = f"requests.engine_step {i + 1}"
        phase = item.get("phase") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not (phase is None or isinstance(phase, str)):
            raise WorkbenchError(str(path), f"{where}: expected name (regex) and phase (text)")
        out.append(EngineStep(_regex(path, where, item.get("name")), phase))
    return out


@dataclass
class PairCodes:
    """Distinct (category, name) pairs and, per event, the index of its pair."""

    categories: list[str | None]
    names: list[str | None]
    inverse: I64


def distinct_pairs(
    category: pa.Array | pa.ChunkedArray, name: pa.Array | pa.ChunkedArray
) -> PairCodes:
    """Dictionary-encode (category, name) so that regexes run once per distinct pair."""
    cat_d = category if isinstance(category, pa.DictionaryArray) else pc.dictionary_encode(category)
    name_d = name if isinstance(name, pa.DictionaryArray) else pc.dictionary_encode(name)
    cat_i = np.asarray(cat_d.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    name_i = np.asarray(name_d.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    width = len(name_d.dictionary) + 1
    pair = (cat_i + 1) * width + (name_i + 1)
    # Numbered in ascending order of pair as np.unique would, without sorting every event.
    inverse, k = dense_ids(pair)
    uniq = np.zeros(k, dtype=np.int64)
    uniq[inverse] = pair
    cats: list[str | None] = cat_d.dictionary.to_pylist()
    names: list[str | None] = name_d.dictionary.to_pylist()
    return PairCodes(
        categories=[cats[c - 1] if c > 0 else None for c in (uniq // width).tolist()],
        names=[names[m - 1] if m > 0 else None for m in (uniq % width).tolist()],
        inverse=inverse,
    )


def match_stage(rules: Rules, category: str | None, name: str | None) -> tuple[str, int]:
    """(stage or "none", priority) of the first rule that matches."""
    cat = category or ""
    text = name or ""
    for rule in rules.rules:
        if rule.categories and cat not in rule.categories:
            continue
        if rule.name.search(text):
            return rule.stage, rule.priority
    return NONE, 0


def stage_codes(rules: Rules, pairs: PairCodes) -> tuple[I64, I64]:
    """Per event: stage code (index in STAGES, -1 = unattributed) and rule priority."""
    codes = np.empty(len(pairs.names), dtype=np.int64)
    prios = np.empty(len(pairs.names), dtype=np.int64)
    for i, (cat, name) in enumerate(zip(pairs.categories, pairs.names, strict=True)):
        stage, prio = match_stage(rules, cat, name)
        codes[i] = STAGE_CODE.get(stage, -1)
        prios[i] = prio
    return codes[pairs.inverse], prios[pairs.inverse]


def pair_mask(pairs: PairCodes, keep: Any) -> npt.NDArray[np.bool_]:
    """Per-event mask from a predicate keep(category, name) evaluated once per distinct pair."""
    per_pair = np.array(
        [bool(keep(c, n)) for c, n in zip(pairs.categories, pairs.names, strict=True)],
        dtype=np.bool_,
    )
    if per_pair.size == 0:
        return np.zeros(len(pairs.inverse), dtype=np.bool_)
    return per_pair[pairs.inverse]
