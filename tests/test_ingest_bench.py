"""bench/ingest.py's figures: uncompressed MB for .gz traces, HTA ratios measured or quoted."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench_scripts import bench_module

BENCH = Path(__file__).resolve().parents[1] / "bench" / "ingest.py"


def bench() -> ModuleType:
    return bench_module("ingest")


def hta_output(path: Path, seconds: float, rss: float, trace_mb: float) -> Path:
    """What bench/hta_reference.py prints: progress lines, then one JSON line."""
    doc = {"trace_mb": trace_mb, "hta_seconds_median": seconds, "hta_peak_rss_mb_median": rss}
    path.write_text(f"built kineto_bench.json: ...\nrun 1: HTA ...\n{json.dumps(doc)}\nrc=0\n")
    return path


def test_measured_reference_gives_the_ratios(tmp_path: Path) -> None:
    b = bench()
    ref = b.hta_reference(hta_output(tmp_path / "hta.txt", 25.0, 1158, 209.0))
    assert (ref["kind"], ref["seconds"], ref["rss_mb"]) == ("measured", 25.0, 1158.0)
    vs = b.versus_hta(5.0, 579.0, ref)
    assert vs["speedup_vs_hta"] == 5.0 and vs["rss_ratio_vs_hta"] == 0.5
    assert vs["hta_reference"] == "measured" and vs["hta_source"] == str(tmp_path / "hta.txt")


def test_without_a_file_the_quoted_figures_are_labelled(tmp_path: Path) -> None:
    b = bench()
    vs = b.versus_hta(9.2, 680.0, b.hta_reference(None))
    assert vs["hta_reference"] == "quoted" and "not measured" in vs["hta_source"]
    assert vs["speedup_vs_hta"] == 2.0 and vs["rss_ratio_vs_hta"] == 0.5


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no JSON line"),
        ("run 1: HTA load 25 s\n", "no JSON line"),
        ('{"hta_seconds_median": 25, \n', "last JSON line is malformed"),
        ('{"hta_seconds_median": 25}\n', "hta_peak_rss_mb_median missing"),
        ('{"hta_seconds_median": 0, "hta_peak_rss_mb_median": 1}\n', "hta_seconds_median"),
    ],
)
def test_bad_reference_file_is_one_line_naming_it(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "hta.txt"
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        bench().hta_reference(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and problem in msg and "\n" not in msg


def test_gz_trace_counts_uncompressed_megabytes(tmp_path: Path) -> None:
    b = bench()
    plain = tmp_path / "t.json"
    b.build_trace(plain, 0.4)
    raw = plain.read_bytes()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(raw))
    hta = hta_output(tmp_path / "hta.txt", 25.0, 1158.0, 209.0)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--trace", str(gz), "--repeat", "1", "--hta-json", str(hta)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    fig = json.loads(lines[-1])
    assert fig["trace_mb"] == round(len(raw) / 1e6, 1)
    assert fig["file_mb"] == round(gz.stat().st_size / 1e6, 1) < fig["trace_mb"]
    assert fig["mb_per_s"] == pytest.approx(len(raw) / 1e6 / fig["import_s_median"], rel=0.05)
    assert fig["hta_reference"] == "measured"
    # import_s_median is printed to the millisecond, so on a fast machine (about 0.05 s here) its
    # rounding alone moves 25 / median by about 1%: bound the speed-up by the rounding interval.
    med = fig["import_s_median"]
    assert 25.0 / (med + 5e-4) - 5e-3 <= fig["speedup_vs_hta"] <= 25.0 / (med - 5e-4) + 5e-3
    assert fig["rss_ratio_vs_hta"] == pytest.approx(fig["peak_rss_mb_median"] / 1158.0, abs=2e-3)
    assert any("(uncompressed)" in ln for ln in lines)
    assert any("measured a 209.0 MB trace" in ln for ln in lines)  # not the same trace: said


def test_the_floor_decodes_every_event_beside_each_import(tmp_path: Path) -> None:
    """The floor splits the events array at one boundary and decodes both halves: it must find
    as many events as the import read, and its ratio is the import's process over its own."""
    b = bench()
    plain = tmp_path / "t.json"
    b.build_trace(plain, 0.4)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--trace", str(plain), "--repeat", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    fig = json.loads(done.stdout.strip().splitlines()[-1])
    assert fig["floor_events"] == fig["events"] > 100
    assert fig["floor_ratio"] == pytest.approx(
        fig["process_s_median"] / fig["floor_process_s"], rel=0.02
    )
    # A gzip trace has no floor (the split reads plain JSON): the gz test's figures lack it.
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert b.floor_sample(gz, tmp_path) is None
