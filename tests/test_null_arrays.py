"""null_arrays.nulls: the same column as pa.nulls, in memory and once written to Parquet."""

from __future__ import annotations

import io
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


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc/self/statm")
def test_large_null_columns_stay_unresident() -> None:
    def resident_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    before = resident_mb()
    held = [nulls(20_000_000, t) for t in (pa.int64(), pa.float64(), pa.string())]
    grown = resident_mb() - before
    # pa.nulls would make 160 + 160 + 80 MB resident; the bitmaps alone are 7.5 MB.
    assert grown < 40, f"{grown:.0f} MB resident for {sum(a.nbytes for a in held) >> 20} MB"
