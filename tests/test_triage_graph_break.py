"""A real torch.compile serving pair with a graph break (tests/fixtures/torch/graph_break_*,
recorded by make_graph_break_fixtures.py there) triages
with origin lowering and mechanism graph_break, the break's reason in the proof: from the trace
alone and from trace + compile log."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.store.ingest import ingest
from workbench.triage.triage import TriageResult, triage

HERE = Path(__file__).resolve().parent / "fixtures" / "torch"
RUNS = ("failing", "comparator")


def _triage(store: Path, with_log: bool) -> TriageResult:
    for role in RUNS:
        stem = HERE / f"graph_break_{role}"
        log = Path(f"{stem}.torch_trace") if with_log else None
        ingest(store, Path(f"{stem}.pt.trace.json.gz"), run_id=role, compile_log=log)
    return triage(store, "failing", "comparator", hardware="h100")


@pytest.fixture(scope="module")
def trace_only(tmp_path_factory: pytest.TempPathFactory) -> TriageResult:
    return _triage(tmp_path_factory.mktemp("gb") / "store", with_log=False)


@pytest.fixture(scope="module")
def with_log(tmp_path_factory: pytest.TempPathFactory) -> TriageResult:
    return _triage(tmp_path_factory.mktemp("gbl") / "store", with_log=True)


def _break_claim(result: TriageResult) -> str:
    texts = [c.text for c in result.claims if c.query == "graph_breaks"]
    assert len(texts) == 1, [c.text for c in result.claims]
    return texts[0]


@pytest.mark.parametrize("which", ["trace_only", "with_log"])
def test_origin_lowering_mechanism_graph_break(which: str, request: pytest.FixtureRequest) -> None:
    result: TriageResult = request.getfixturevalue(which)
    assert result.triggered
    assert (result.origin_stage, result.mechanism) == ("lowering", "graph_break")
    claim = next(c for c in result.claims if c.query == "graph_breaks")
    # Every steady-state failing request is split at its 4 `.item()` calls: 5 compiled regions
    # (the model and its resumed frames, nested) against one, 4 eager ops between graphs.
    assert claim.numbers["split_share"] == 1.0
    assert (claim.numbers["failing_regions_p50"], claim.numbers["comparator_regions_p50"]) == (
        5.0, 1.0,
    )  # fmt: skip
    assert claim.numbers["eager_ops"] == {"aten::item": 4}


def test_trace_alone_names_the_op_at_the_break(trace_only: TriageResult) -> None:
    text = _break_claim(trace_only)
    assert "aten::item" in text and "eagerly between compiled graphs" in text
    assert "remove the host read (aten::item)" in text


def test_compile_log_gives_reason_line_and_action(with_log: TriageResult) -> None:
    text = _break_claim(with_log)
    assert "Unsupported Tensor.item() call with capture_scalar_outputs=False" in text
    assert "make_graph_break_fixtures.py:" in text and ".item()" in text.split("`")[1]
    assert "action: remove the break at" in text and "capture_scalar_outputs = True" in text
