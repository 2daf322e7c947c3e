"""null_arrays.nulls: the same column as pa.nulls, in memory and once written to Parquet."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.store.columns.null_arrays import nulls

TYPES = [pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_(), pa.large_string()]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100_003])
def test_nulls_equal_pyarrow_nulls_and_survive_parquet(n: int) -> None:
    ours = pa.table({str(t): nulls(n, t) for t in TYPES})
    theirs = pa.table({str(t): pa.nulls(n, t) for t in TYPES})
    for col in ours.columns:
        col.validate(full=True)
        assert col.null_count == n
    assert ours.equals(theirs)
    buf = io.BytesIO()
    pq.write_table(ours, buf)
    assert pq.read_table(io.BytesIO(buf.getvalue())).equals(theirs)


MEASURE = """
import pyarrow as pa
from workbench.store.columns.null_arrays import nulls

def resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

before = resident_mb()
held = [nulls(20_000_000, t) for t in (pa.int64(), pa.float64(), pa.string())]
print(resident_mb() - before, sum(a.nbytes for a in held) >> 20)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc/self/statm")
def test_large_null_columns_stay_unresident() -> None:
    # A fresh process: a test worker's heap, left by earlier tests, can serve the calloc from
    # pages already touched, which says nothing about the columns.
    out = subprocess.run(
        [sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    grown, held_mb = float(out[0]), int(out[1])
    assert held_mb >= 380  # the columns are there, at their full logical size
    # pa.nulls would make 160 + 160 + 80 MB resident; the bitmaps alone are 7.5 MB.
    assert grown < 40, f"{grown:.0f} MB resident for {held_mb} MB"
