"""Recorded fault pairs none of the method's tuning fixtures resemble (tests/fixtures/real_pairs,
recorded by bench/corpus/record.py --half fixtures): burstier arrivals at the same rate, a graph
break by `print` in a larger model, and a recompile storm in which a handful of ~80 requests
recompile for seconds. Each is triaged through the CLI; the store is unchanged by it."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from workbench.cli.main import main
from workbench.store.ingest import ingest

HERE = Path(__file__).resolve().parent / "fixtures" / "real_pairs"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
PAIRS = {p["kind"]: p for p in MANIFEST["pairs"]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real_pairs") / "store"
    for pair in MANIFEST["pairs"]:
        for role in ("failing", "comparator"):
            stem = f"{pair['pair_id']}.{role}"
            ingest(root, HERE / f"{stem}.pt.trace.json.gz", run_id=stem,
                   compile_log=HERE / f"{stem}.torch_trace")  # fmt: skip
    return root


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def triage(store: Path, kind: str, capsys: Any) -> dict[str, Any]:
    pid = PAIRS[kind]["pair_id"]
    before = digest(store)
    argv = ["triage", "--store", str(store), "--failing", f"{pid}.failing"]
    assert main([*argv, "--comparator", f"{pid}.comparator", "--json"]) == 0
    assert digest(store) == before
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def requests_of(stem: str) -> list[dict[str, Any]]:
    with gzip.open(HERE / f"{stem}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
        events: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    return [e for e in events if re.fullmatch(r"request#\d+", str(e.get("name")))]


def cited(doc: dict[str, Any]) -> str:
    return next(c["text"] for c in doc["claims"] if c["text"].startswith("mechanism "))


def test_burstier_arrivals_at_the_same_rate_are_an_ingress_regression(
    store: Path, capsys: Any
) -> None:
    doc = triage(store, "bursty_arrivals", capsys)
    assert doc["verdict"]["outcome"] == "regression"
    assert (doc["origin_stage"], doc["mechanism"]) == ("ingress", "queueing")
    assert "rests on requests with a queue wait" in cited(doc)


def test_a_print_graph_break_in_a_larger_model_is_lowering_graph_break(
    store: Path, capsys: Any
) -> None:
    pair = PAIRS["break_print"]
    # Another size and break kind than the .item() fixtures of tests/fixtures/torch (d_model 64).
    assert pair["failing"]["d_model"] != 64 and pair["failing"]["requests"] != 200
    log = HERE / f"{pair['pair_id']}.failing.torch_trace" / "dedicated_log_torch_trace.log.gz"
    assert "print" in gzip.decompress(log.read_bytes()).decode("utf-8", "replace")
    doc = triage(store, "break_print", capsys)
    assert doc["verdict"]["outcome"] == "regression"
    assert (doc["origin_stage"], doc["mechanism"]) == ("lowering", "graph_break")
    assert "rests on requests split into more compiled regions" in cited(doc)
    assert not any("barrier" in c["text"] and "rests on" in c["text"] for c in doc["claims"])
    assert doc["origin_probability"] == doc["confidence"]


def test_a_recompile_storm_in_a_few_of_80_requests_is_lowering_recompile(
    store: Path, capsys: Any
) -> None:
    pair = PAIRS["static_shapes"]
    stem = f"{pair['pair_id']}.failing"
    assert 70 <= len(requests_of(stem)) <= 90
    doc = triage(store, "static_shapes", capsys)
    # A handful of steady-state recompiles (guard failures on the input), each of seconds.
    rc = doc["recompiles"]
    assert 3 <= rc["count"] <= 8 and rc["total_us"] > 1_000_000 * rc["count"]
    v = doc["verdict"]
    assert v["outcome"] == "regression"
    assert (doc["origin_stage"], doc["mechanism"]) == ("lowering", "recompile")
    assert f"n={rc['count']} in the failing run, 0 in the comparator" in cited(doc)
    # The verdict names the reading that decided: the observed gaps, or a further one.
    p95, p99 = doc["p95_gap_us"], doc["p99_gap_us"]
    if p95["lo"] <= 0 and p99["lo"] <= 0:
        assert (
            "regressed at equal traffic" in v["reason"]
            or "tail-exceedance" in v["reason"]
            or ("queue-free tail" in v["reason"])
        )
