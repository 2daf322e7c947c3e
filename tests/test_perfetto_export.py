"""`workbench export --incident ID --perfetto FILE` and the Localize screen's `p`: the sample
incident's failing and comparator runs as one Chrome-trace file, read back by our own importer
(`workbench ingest`) and by HolisticTraceAnalysis, with the tail request and its twin aligned and
the verdict and findings annotated. Hostile targets and text. Real CLI in subprocesses."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ingest_helpers import run_workbench, store_hash
from tests.incident_runs import Spec, build
from workbench.cli.main import bundled_sample
from workbench.incident import workflow
from workbench.incident.incident import create_incident, load_incident
from workbench.store import layout
from workbench.triage.evidence import Interval
from workbench.triage.perfetto import comparison_trace, lanes, trace_text
from workbench.triage.triage import TriageResult, triage

INC = "INC-perfetto"
ANNOTATION = re.compile(r"^(origin|manifest|origin\+manifest|finding|verdict): ")


def workbench(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_workbench(list(argv), home=home, timeout=300)


def no_nan(text: str) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} written into the trace")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A copy of the sample store with the sample incident paired and triaged, and its trace
    exported once through the CLI over an older file (--force)."""
    root = tmp_path_factory.mktemp("perfetto")
    store = root / "store"
    shutil.copytree(bundled_sample(), store, ignore=shutil.ignore_patterns("incidents", "*.md"))
    create_incident(store, "p99 after compiler 2.5.0", "sev2", "oncall", incident_id=INC)
    workflow.pair(store, INC, "failing", "comparator", "oncall", "fixed-metadata")
    doc = triage(store, "failing", "comparator", fixed="fixed-metadata").to_json()
    workflow.attach_triage(store, INC, doc, "oncall")
    out = root / "out" / "sample.perfetto.json"
    out.parent.mkdir()
    out.write_text("an older export\n", encoding="utf-8")
    before = store_hash(store)
    done = workbench(
        root, "export", "--incident", INC, "--perfetto", str(out), "--force", "--store", str(store)
    )
    assert done.returncode == 0, done.stderr
    return {
        "root": root,
        "store": store,
        "out": out,
        "done": done,
        "before": before,
        "doc": no_nan(out.read_text(encoding="utf-8")),
        "triage": doc,
    }


def _requests(store: Path, *runs: str) -> list[float]:
    """Latencies of the runs' requests in the store, as any Parquet reader sees them."""
    con = duckdb.connect()
    paths = [str(store / "requests" / f"run_id={r}" / "*.parquet") for r in runs]
    rows = con.execute("SELECT latency_us FROM read_parquet($p)", {"p": paths}).fetchall()
    return sorted(float(r[0]) for r in rows)


def _slices(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_cli_writes_one_line_and_changes_nothing_else(sample: dict[str, Any]) -> None:
    out, done = sample["out"], sample["done"]
    assert store_hash(sample["store"]) == sample["before"]  # the store and incident record too
    assert done.stdout == (
        f"wrote {out} ({out.stat().st_size} bytes): requests failing 240, comparator 6000; "
        "'r000227' of failing aligned with 'r002437' of comparator\n"
    )
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary file left


def test_tail_and_twin_start_together_as_the_app_pairs_them(sample: dict[str, Any]) -> None:
    from workbench.tui.screens.request_screen import DrillTarget, drill

    doc = sample["doc"]
    tail, twin = doc["otherData"]["tail"], doc["otherData"]["twin"]
    shown_f, shown_c = drill(sample["store"], DrillTarget("failing", "comparator"))
    assert shown_f is not None and shown_c is not None
    assert (tail["request_id"], twin["request_id"]) == (shown_f.request_id, shown_c.request_id)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    pid_f = next(p for p, n in names.items() if n == "failing failing")
    pid_c = next(p for p, n in names.items() if n == "comparator comparator")
    order = {
        e["pid"]: e["args"]["sort_index"]
        for e in doc["traceEvents"]
        if e["name"] == "process_sort_index"
    }
    assert abs(order[pid_f] - order[pid_c]) == 1  # adjacent process tracks
    reqs = _slices(doc, "user_annotation")
    a = next(e for e in reqs if e["pid"] == pid_f and e["args"]["request_id"] == tail["request_id"])
    b = next(e for e in reqs if e["pid"] == pid_c and e["args"]["request_id"] == twin["request_id"])
    assert a["ts"] == b["ts"] and a["args"]["aligned"] and b["args"]["aligned"]
    assert a["dur"] == pytest.approx(tail["latency_us"]) and b["dur"] == pytest.approx(
        twin["latency_us"]
    )
    assert min(e["ts"] for e in reqs) >= 0
    # Stage children: inside their request, summing to its latency (the store's invariant).
    stages = _slices(doc, "stage")
    mine = [s for s in stages if s["pid"] == pid_f and s["tid"] == a["tid"]]
    inside = [s for s in mine if a["ts"] <= s["ts"] and s["ts"] + s["dur"] <= a["ts"] + a["dur"]]
    assert sum(s["dur"] for s in inside) == pytest.approx(a["dur"], rel=1e-9)
    # Requests of one lane never meet: each reads back as a request of its own.
    for pid in (pid_f, pid_c):
        by_lane: dict[int, list[tuple[float, float]]] = {}
        for e in reqs:
            if e["pid"] == pid:
                by_lane.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
        for spans in by_lane.values():
            spans.sort()
            assert all(e0 < s1 for (_, e0), (s1, _) in itertools.pairwise(spans))


def test_annotations_carry_effect_interval_and_n(sample: dict[str, Any]) -> None:
    doc, attached = sample["doc"], sample["triage"]
    marks = {e["name"]: e for e in _slices(doc, "incident")}
    assert {"verdict: regression", "origin: lowering", "manifest: execution"} <= set(marks)
    verdict = marks["verdict: regression"]
    assert verdict["args"]["mechanism"] == "fusion_memory_burst"
    assert [c["text"] for c in verdict["args"]["claims"]] == [c["text"] for c in attached["claims"]]
    findings = [e for name, e in marks.items() if name.startswith(("finding", "origin", "manif"))]
    assert len(findings) >= 10
    for e in findings:
        args = e["args"]
        assert set(args) >= {"effect", "interval", "n"}, e["name"]
        assert len(args["interval"]) == 2 and args["n"]["failing"] == 240, e["name"]
        lo, hi = args["interval"]
        assert lo <= args["effect"] <= hi or args["quantile"].startswith("location"), e["name"]
    # The same figures the incident's attached triage printed: one set of intervals everywhere.
    p99 = marks["finding: p99 latency gap"]["args"]
    gap = attached["p99_gap_us"]
    assert (p99["effect"], p99["interval"]) == (gap["value"], [gap["lo"], gap["hi"]])
    assert p99["interval_excludes_zero"] is True
    # The origin and manifest sit over their stage in the tail request's layout.
    tail_id = doc["otherData"]["tail"]["request_id"]
    tail = next(e for e in _slices(doc, "user_annotation") if e["args"].get("aligned") and
                e["args"]["request_id"] == tail_id)  # fmt: skip
    for mark, stage in (("origin: lowering", "lowering"), ("manifest: execution", "execution")):
        over = next(
            s
            for s in _slices(doc, "stage")
            if (s["pid"], s["tid"], s["name"]) == (tail["pid"], tail["tid"], stage)
            and tail["ts"] <= s["ts"] <= tail["ts"] + tail["dur"]
        )
        assert (marks[mark]["ts"], marks[mark]["dur"]) == (over["ts"], over["dur"])
    # Queue depth counters for both runs.
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {tail["pid"], 3 if tail["pid"] == 2 else 2}
    assert max(e["args"]["waiting"] for e in counters) >= 1
    assert all(isinstance(e["args"]["in service"], int) for e in counters)


def test_our_importer_reads_it_back(sample: dict[str, Any], tmp_path: Path) -> None:
    back = tmp_path / "back"
    done = workbench(tmp_path, "ingest", str(sample["out"]), "--store", str(back), "--run-id", "ab")
    assert done.returncode == 0, done.stderr
    # Every request of both runs, each with its latency.
    want = _requests(sample["store"], "failing", "comparator")
    got = _requests(back, "ab")
    assert len(got) == len(want) == 240 + 6000
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)
    con = duckdb.connect()
    rows = con.execute(
        "SELECT name, args FROM read_parquet($p) WHERE category = 'incident'",
        {"p": str(back / "events" / "run_id=ab" / "*.parquet")},
    ).fetchall()
    args = {name: json.loads(text) for name, text in rows}
    assert {"origin: lowering", "manifest: execution", "finding: p99 latency gap"} <= set(args)
    assert all(
        {"effect", "interval", "n"} <= set(a) for n, a in args.items() if not n.startswith("verd")
    )


def test_holistic_trace_analysis_reads_it(sample: dict[str, Any], tmp_path: Path) -> None:
    from hta.trace_analysis import TraceAnalysis

    trace_dir = tmp_path / "hta"
    trace_dir.mkdir()
    shutil.copy(sample["out"], trace_dir / "rank0.json")
    t = TraceAnalysis(trace_dir=str(trace_dir)).t
    df = t.get_trace(0)
    symbols = t.symbol_table.get_sym_table()
    name = df["name"].map(lambda i: symbols[i])
    cat = df["cat"].map(lambda i: symbols[i])
    requests = df[cat == "user_annotation"]
    assert requests.groupby("pid").size().to_dict() == {2: 240, 3: 6000}
    annotations = {n for n in symbols if ANNOTATION.match(str(n))}
    assert {"origin: lowering", "manifest: execution", "verdict: regression"} <= annotations
    assert {"finding: p99 latency gap", "finding: execution p99 own time"} <= annotations
    other = sample["doc"]["otherData"]
    ts = {
        pid: float(df[(name == f"request {other[role]['request_id']}") & (df["pid"] == pid)]["ts"].iloc[0])
        for pid, role in ((2, "tail"), (3, "twin"))
    }  # fmt: skip
    assert ts[2] == ts[3]


# -- hostile targets -------------------------------------------------------------------------


def _refused(sample: dict[str, Any], target: Path, *extra: str) -> str:
    before = store_hash(sample["store"])
    done = workbench(
        sample["root"],
        "export",
        "--incident",
        INC,
        "--perfetto",
        str(target),
        *extra,
        "--store",
        str(sample["store"]),
    )
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1, done.stderr
    assert store_hash(sample["store"]) == before
    return done.stderr


def test_hostile_targets_are_refused_in_one_line(sample: dict[str, Any], tmp_path: Path) -> None:
    existing = tmp_path / "existing.json"
    existing.write_text("mine", encoding="utf-8")
    assert "exists; add --force" in _refused(sample, existing)
    assert existing.read_text(encoding="utf-8") == "mine"
    link = tmp_path / "link.json"
    link.symlink_to(existing)
    assert "is a symbolic link" in _refused(sample, link, "--force")
    assert existing.read_text(encoding="utf-8") == "mine" and link.is_symlink()
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "is a FIFO" in _refused(sample, fifo, "--force")  # never opened: no hang
    assert "is a folder" in _refused(sample, tmp_path, "--force")
    inside = sample["store"] / "incidents" / f"{INC}.json"
    assert "is inside the store" in _refused(sample, inside, "--force")
    assert "is inside the store" in _refused(sample, sample["store"] / "new.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json", "fifo.json", "link.json"]


def test_refusals_after_making_folders_leave_none(sample: dict[str, Any], tmp_path: Path) -> None:
    store = sample["store"]
    for argv, problem in (
        (["--incident", "INC-nope"], "no such incident"),
        (["--incident", INC, "-o", str(tmp_path / "x.md")], "not allowed with argument"),
    ):
        before = store_hash(store)
        target = tmp_path / "a" / "b" / "t.json"
        done = workbench(
            tmp_path, "export", *argv, "--perfetto", str(target), "--store", str(store)
        )
        assert done.returncode == 2 and problem in done.stderr and done.stderr.count("\n") == 1
        assert not (tmp_path / "a").exists() and store_hash(store) == before
    store = tmp_path / "store"  # not the shared one: the app test opens its latest incident
    shutil.copytree(sample["store"], store, ignore=shutil.ignore_patterns("incidents"))
    create_incident(store, "not paired", "sev3", "oncall", incident_id="INC-unpaired")
    before = store_hash(store)
    done = workbench(
        tmp_path,
        "export",
        "--incident",
        "INC-unpaired",
        "--perfetto",
        str(tmp_path / "u.json"),
        "--store",
        str(store),
    )
    assert done.returncode == 2 and "pairs no failing and comparator run" in done.stderr
    assert store_hash(store) == before and not (tmp_path / "u.json").exists()


# -- hostile text ----------------------------------------------------------------------------

HOSTILE = 'q{i}"\n## *x* `y` </script>\u2028\x1b[31m|'


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TriageResult]:
    """Two small runs whose request ids and shape keys hold quotes, newlines, Markdown, an
    escape sequence and a line separator, triaged."""
    store = tmp_path_factory.mktemp("hostile") / "store"
    for spec in (Spec("comparator", seed=1), Spec("failing", seed=2, slow={"execution": 1.8})):
        t = build(spec)
        ids = pa.array([HOSTILE.format(i=i) for i in range(spec.n)])
        shapes = pa.array([f"{s}\n**{s}**" for s in t.requests.column("shape_key").to_pylist()])
        requests = t.requests.set_column(0, "request_id", ids)
        requests = requests.set_column(
            requests.schema.get_field_index("shape_key"), "shape_key", shapes
        )
        events = t.events.set_column(1, "request_id", ids)
        layout.commit_run(
            store, replace(t, requests=requests, events=events), source=f"test:{spec.run_id}"
        )
    return store, triage(store, "failing", "comparator")


def test_hostile_text_is_json_escaped_and_reads_back(
    hostile: tuple[Path, TriageResult], tmp_path: Path
) -> None:
    store, result = hostile
    text = trace_text(comparison_trace(store, result))
    assert "\n" not in text[:-1] and "\x1b" not in text and "\u2028" not in text
    doc = no_nan(text)
    ids = {e["args"]["request_id"] for e in _slices(doc, "user_annotation")}
    assert ids == {HOSTILE.format(i=i) for i in range(400)}
    out = tmp_path / "hostile.json"
    out.write_text(text, encoding="utf-8")
    done = workbench(tmp_path, "ingest", str(out), "--store", str(tmp_path / "b"), "--run-id", "h")
    assert done.returncode == 0, done.stderr
    assert len(_requests(tmp_path / "b", "h")) == 800


def test_nan_figures_are_written_as_null(hostile: tuple[Path, TriageResult]) -> None:
    store, result = hostile
    nan = Interval(math.nan, math.nan, math.nan)
    broken = replace(result, p99_gap=nan, confidence=math.nan, explained_share=math.inf)
    doc = no_nan(trace_text(comparison_trace(store, broken)))
    marks = {e["name"]: e["args"] for e in _slices(doc, "incident")}
    gap = marks["finding: p99 latency gap"]
    assert gap["effect"] is None and gap["interval"] == [None, None]
    assert gap["interval_excludes_zero"] is None
    verdict = next(a for n, a in marks.items() if n.startswith("verdict: "))
    assert verdict["confidence"] is None and verdict["explained_share"] is None


def test_no_regression_has_no_stage_marks(hostile: tuple[Path, TriageResult]) -> None:
    store, result = hostile
    none = replace(result, origin_stage=None, manifest_stage=None, mechanism="none")
    names = {e["name"] for e in _slices(comparison_trace(store, none), "incident")}
    assert not {n for n in names if n.startswith(("origin", "manifest"))}
    assert "finding: p99 latency gap" in names


def test_a_big_run_is_cut_to_the_requests_around_the_tail(
    hostile: tuple[Path, TriageResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.triage import perfetto

    store, result = hostile
    monkeypatch.setattr(perfetto, "MAX_REQUESTS", 50)
    doc = comparison_trace(store, result)
    other = doc["otherData"]
    assert other["requests"]["failing"] == {"shown": 50, "in_run": 400, "left_out_invalid": 0}
    reqs = _slices(doc, "user_annotation")
    assert len(reqs) == 100
    aligned = [e for e in reqs if e["args"].get("aligned")]
    assert len(aligned) == 2 and aligned[0]["ts"] == aligned[1]["ts"]
    assert {e["args"]["request_id"] for e in aligned} == {
        other["tail"]["request_id"],
        other["twin"]["request_id"],
    }


def test_lanes_never_let_requests_meet() -> None:
    begin = np.array([0.0, 0.0, 1.0, 2.0, 2.0, 5.0, 5.0])
    end = np.array([2.0, 0.0, 3.0, 2.0, 4.0, 6.0, 5.0])
    got = lanes(begin, end)
    for lane in set(got):
        spans = sorted((b, e) for b, e, g in zip(begin, end, got, strict=True) if g == lane)
        assert all(e0 < s1 for (_, e0), (s1, _) in itertools.pairwise(spans))
    assert got[:2] == [0, 1] and max(got) <= 3  # a freed lane is reused


# -- the app's key -----------------------------------------------------------------------------


def test_localize_key_and_palette_export_the_trace(sample: dict[str, Any], tmp_path: Path) -> None:
    from test_tui_support import make_app, wait_for
    from workbench.tui.palette import WorkbenchCommands
    from workbench.tui.screens.confirm_modal import ConfirmModal

    store = tmp_path / "store"
    shutil.copytree(sample["store"], store)
    state = tmp_path / "state"
    out = state / "exports" / f"{INC}.perfetto.json"

    async def go() -> None:
        app = make_app(store, state_dir=state)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.incident is not None, "incident")
            await pilot.press("4")
            await wait_for(pilot, lambda: app.current_mode == "localize", "localize")
            await pilot.press("p")  # the exports folder is missing: asked first
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "confirm")
            await pilot.press("y")
            await wait_for(pilot, lambda: out.is_file(), "the trace", timeout=120)
            first = no_nan(out.read_text(encoding="utf-8"))
            assert first["otherData"]["requests"]["failing"]["shown"] == 240
            out.unlink()
            hits = [h async for h in WorkbenchCommands(app.screen).search("perfetto")]
            assert hits and "Perfetto" in str(hits[0].text)
            await hits[0].command()  # the folder exists now: no question
            await wait_for(pilot, lambda: out.is_file(), "the trace again", timeout=120)
            assert no_nan(out.read_text(encoding="utf-8"))["otherData"] == first["otherData"]

    asyncio.run(go())
    assert load_incident(store, INC).version == load_incident(sample["store"], INC).version
