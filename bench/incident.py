"""Incident record and validation costs: save latency vs record size, validate and export time.

Builds a store of synthetic runs with --requests requests each (tests/incident_runs.py), walks an
incident to `validating`, then times (median of --repeat runs): one atomic save of the record,
validate_incident (7 guardrails, 2000 bootstrap resamples each, PSI check), and both exports.
Ends with one JSON line.

    uv run python bench/incident.py [--requests 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the run generator lives with the tests

import msgspec  # noqa: E402

from tests.incident_runs import Spec, triage_doc, write  # noqa: E402
from workbench.incident import workflow  # noqa: E402
from workbench.incident.export import export_text  # noqa: E402
from workbench.incident.incident import create_incident, incident_path, modify  # noqa: E402
from workbench.incident.owners import load_roster  # noqa: E402
from workbench.incident.validation import validate_incident  # noqa: E402


def _median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.requests
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        write(store, Spec("comparator", n=n, seed=1))
        write(store, Spec("failing", n=n, seed=2, slow={"execution": 1.8}))
        write(store, Spec("candidate-rollback", n=n, seed=4))
        iid = create_incident(store, "bench", "sev2", "bench", incident_id="INC-bench").id
        workflow.pair(store, iid, "failing", "comparator", "bench")
        workflow.attach_triage(store, iid, triage_doc(), "bench")
        workflow.classify(store, iid, "bench")
        roster = load_roster(store)
        workflow.assign(store, iid, "compiler lead", "carol", "bench", roster)
        workflow.assign(store, iid, "runtime lead", "dave", "bench", roster)
        validate_s = _median_seconds(
            lambda: validate_incident(store, iid, "candidate-rollback", "bench"), args.repeat
        )
        record_bytes = incident_path(store, iid).stat().st_size
        counter = iter(range(10**9))
        save_s = _median_seconds(
            lambda: modify(
                store, iid, "bench", lambda i: msgspec.structs.replace(i, title=f"t{next(counter)}")
            ),
            args.repeat,
        )
        md_s = _median_seconds(lambda: export_text(store, iid, "md"), args.repeat)
        json_s = _median_seconds(lambda: export_text(store, iid, "json"), args.repeat)
    figures = {
        "requests_per_run": n,
        "repeat": args.repeat,
        "validate_s": round(validate_s, 3),
        "validate_requests_per_s": round(3 * n / validate_s),
        "save_s": round(save_s, 4),
        "record_bytes": record_bytes,
        "export_md_s": round(md_s, 3),
        "export_json_s": round(json_s, 3),
    }
    print(
        f"{n} requests per run: validate {validate_s:.2f} s, load+save of a "
        f"{record_bytes / 1024:.0f} KiB record {1000 * save_s:.1f} ms, export md {md_s:.2f} s, "
        f"json {json_s:.2f} s (medians of {args.repeat})"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
