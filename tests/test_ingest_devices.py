"""Device descriptions: the runs row's hardware, `device.*` facts and the profile picked for it."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from accel.profiles import get_profile, match_profile
from workbench.store.ingest import ingest


def _run(store: Path, run_id: str) -> dict[str, object]:
    row: dict[str, object] = pq.read_table(store / "runs" / f"{run_id}.parquet").to_pylist()[0]
    return row


def test_cross_hardware_pair_describes_both_devices(shared_traces: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    serving = shared_traces / "serving"
    h100 = ingest(store, serving / "bert_small_h100.json.gz", run_id="h100")
    mi300x = ingest(store, serving / "bert_small_mi300x.json.gz", run_id="mi300x")
    a, b = _run(store, "h100"), _run(store, "mi300x")
    assert (a["hardware"], a["runtime"]) == ("NVIDIA H100 80GB HBM3", "cuda")
    assert (b["hardware"], b["runtime"]) == ("AMD Instinct MI300X VF", "rocm")
    # deviceProperties: numSms and totalGlobalMem as Kineto records them.
    assert (a["device_sm_count"], b["device_sm_count"]) == (132, 304)
    assert (a["device_memory_gb"], b["device_memory_gb"]) == (85.0, 205.6)
    # Each run is replayed on the profile of its own device.
    assert h100.device == "NVIDIA H100 80GB HBM3 (profile h100)"
    assert mi300x.device == "AMD Instinct MI300X VF (profile mi300x)"
    assert get_profile(str(match_profile(str(a["hardware"])))).core_count == 132
    assert get_profile(str(match_profile(str(b["hardware"])))).core_count == 304


def test_nsys_device_picks_the_40gb_a100(shared_traces: Path, tmp_path: Path) -> None:
    report = ingest(tmp_path / "s", shared_traces / "nsys" / "saxpy_a100.sqlite", run_id="a")
    assert report.device == "NVIDIA A100-SXM4-40GB (profile a100-40gb)"
    a100 = get_profile("a100-40gb")
    run = _run(tmp_path / "s", "a")
    # The export's own figures agree with the datasheet profile.
    assert run["device_sm_count"] == a100.core_count
    assert abs(float(run["device_memory_bandwidth_gbs"]) * 1e9 - a100.hbm_bw) < 1e9  # type: ignore[arg-type]


def test_unknown_device_says_so(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parent / "fixtures" / "serving" / "handmade_serving.json"
    report = ingest(tmp_path / "s", trace, run_id="h")
    assert report.device == "Test GPU 1 (no hardware profile matches)"
