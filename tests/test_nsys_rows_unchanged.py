"""The nsys importer's rows, value for value, as they were before its speed work.

tests/fixtures/nsys/expected_rows.json.gz holds the events and requests tables that the
importer wrote (main at aa7719f) for the real 2022 export, the committed current-schema
fixture and a generated export with two processes. A change meant to alter them rewrites it:

    uv run python tests/test_nsys_rows_unchanged.py
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ingest_helpers import ROOT, TRACES
from workbench.store.ingest import ingest

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nsys"))
from make_nsys_export import write_export

EXPECTED = ROOT / "tests" / "fixtures" / "nsys" / "expected_rows.json.gz"
SAXPY = TRACES / "nsys" / "saxpy_a100.sqlite"
TABLES = ("events", "requests")


def source(key: str, tmp: Path) -> Path:
    if key == "saxpy_a100":
        if not SAXPY.is_file():
            pytest.skip(f"needs the real traces folder {TRACES} (nsys/saxpy_a100.sqlite)")
        return SAXPY
    if key == "current_schema":
        return ROOT / "tests" / "fixtures" / "nsys" / "current_schema.sqlite"
    path = tmp / "generated.sqlite"
    write_export(path, 7, 2, 5)  # 7 requests per process, 2 processes, 5 kernels per request
    return path


def imported_rows(key: str, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    store = tmp / f"store-{key}"
    ingest(store, source(key, tmp), run_id="r")
    return {t: pq.read_table(store / t / "run_id=r" / "part-0.parquet").to_pylist() for t in TABLES}


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (floats compared exactly otherwise)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b) and type(a) is type(b)


@pytest.mark.parametrize("key", ["saxpy_a100", "current_schema", "generated_7x2x5"])
def test_rows_are_the_ones_written_before(key: str, tmp_path: Path) -> None:
    expected = json.loads(gzip.decompress(EXPECTED.read_bytes()))[key]
    got = imported_rows(key, tmp_path)
    for table in TABLES:
        want, have = expected[table], got[table]
        assert len(have) == len(want), table
        # The same columns in the same order; schema v3 appends serving columns, null here.
        assert list(have[0])[: len(want[0])] == list(want[0]), table
        assert all(h[c] is None for h in have for c in list(h)[len(want[0]) :]), table
        for i, (h, w) in enumerate(zip(have, want, strict=True)):
            diff = {c: (h[c], w[c]) for c in w if not same(h[c], w[c])}
            assert not diff, f"{table} row {i}: {diff}"


def main() -> None:
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in ("saxpy_a100", "current_schema", "generated_7x2x5"):
            out[key] = imported_rows(key, Path(tmp))
    EXPECTED.write_bytes(gzip.compress(json.dumps(out).encode(), mtime=0))


if __name__ == "__main__":
    main()
