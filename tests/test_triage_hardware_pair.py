"""The bert-small H100 / MI300X pair (one step each): too few requests for a tail, refused in
one line that leads with the hardware difference; same hardware keeps the plain refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingest_helpers import store_hash
from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.store.ingest import ingest
from workbench.triage.context import load_present
from workbench.triage.hardware_pair import check_enough_requests

PAIR = {"h100": "bert_small_h100.json.gz", "mi300x": "bert_small_mi300x.json.gz"}


@pytest.fixture(scope="module")
def store(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bert") / "store"
    for rid, name in PAIR.items():
        ingest(root, shared_traces / "serving" / name, run_id=rid)
    ingest(root, shared_traces / "serving" / PAIR["h100"], run_id="h100_again")
    return root


def _refusal(store: Path, failing: str, comparator: str) -> WorkbenchError:
    con = db.connect(store)
    try:
        with pytest.raises(WorkbenchError) as info:
            ctx = load_present(con, failing, comparator)
            check_enough_requests(con, ctx[failing], ctx[comparator], 5)
    finally:
        con.close()
    return info.value


def test_both_devices_are_described(store: Path) -> None:
    con = db.connect(store)
    try:
        ctx = load_present(con, "h100", "mi300x")
    finally:
        con.close()
    assert ctx["h100"].hardware == "NVIDIA H100 80GB HBM3"
    assert ctx["mi300x"].hardware == "AMD Instinct MI300X VF"


def test_cross_hardware_refusal_leads_with_the_hardware(store: Path) -> None:
    err = _refusal(store, "mi300x", "h100")
    line = err.one_line()
    assert "\n" not in str(err) and line.startswith("'mi300x' vs 'h100': inconclusive")
    assert (
        "different hardware (AMD Instinct MI300X VF (profile mi300x) vs "
        "NVIDIA H100 80GB HBM3 (profile h100))" in line
    )
    assert "1 request vs 1 request" in line and "a tail needs 5 per run" in line


def test_same_hardware_keeps_the_plain_refusal(store: Path) -> None:
    err = _refusal(store, "h100_again", "h100")
    assert str(err) == "'h100_again': failing run has fewer than 5 requests to compare"


def test_enough_requests_passes(store: Path) -> None:
    con = db.connect(store)
    try:
        ctx = load_present(con, "mi300x", "h100")
        check_enough_requests(con, ctx["mi300x"], ctx["h100"], 1)
    finally:
        con.close()


def test_cli_refuses_the_pair_in_one_line(store: Path) -> None:
    before = store_hash(store)
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "triage", "--store", str(store), "--failing",
         "mi300x", "--comparator", "h100"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "'mi300x'" in lines[0] and "1 request vs 1 request" in lines[0]
    # it leads with the hardware difference, naming both devices
    assert "inconclusive: different hardware" in lines[0]
    assert "MI300X" in lines[0] and "H100" in lines[0]
    assert store_hash(store) == before
