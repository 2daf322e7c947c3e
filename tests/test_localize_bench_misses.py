"""bench/localize.py --misses: every look of each pair missed at look 1, with the miss's class."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from bench_scripts import bench_module
from localize_rows import bench_row as row


def bench() -> ModuleType:
    return bench_module("localize_report")


def test_misses_keep_every_look_of_a_missed_pair_and_class_it(tmp_path: Path) -> None:
    b = bench()
    rows = [
        # right at look 1: not written
        row("assembly", 1, 1, "assembly", "regression"),
        # inconclusive at look 1, right at look 3: both looks written, classed apart
        row("assembly", 2, 1, "none", "inconclusive", mechanism="none"),
        row("assembly", 2, 3, "assembly", "regression"),
        # called no regression
        row("assembly", 3, 1, "none", "no regression", mechanism="none"),
        # a wrong origin, and a right origin with the wrong mechanism
        row("assembly", 4, 1, "execution", "regression", mechanism="barrier_stall"),
        row("assembly", 5, 1, "assembly", "regression", mechanism="queueing"),
        # an A/A pair that fired, and one that did not (right: not written)
        row("none", 6, 1, "execution", "regression", mechanism="core_imbalance"),
        row("none", 7, 1, "none", "no regression"),
        # another method's rows are never written
        {**row("assembly", 8, 1, "ingress", "regression"), "method": "naive"},
    ]
    path = tmp_path / "misses.jsonl"
    b.write_misses(path, rows)
    got = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["seed"], r["look"], r["miss"]) for r in got] == [
        (2, 1, "inconclusive"),
        (2, 3, "right"),
        (3, 1, "no fire"),
        (4, 1, "wrong origin"),
        (5, 1, "wrong mechanism"),
        (6, 1, "false alarm"),
    ]
