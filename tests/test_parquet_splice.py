"""Parquet files joined by copying their row groups: the same bytes ParquetWriter writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.store.fleet.parquet_splice import SplicedWriter, decode_footer, encode_struct

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("dims", pa.list_(pa.int32())),
        ("score", pa.float64()),
        ("flag", pa.bool_()),
    ],
    metadata={b"origin": b"test"},
)


def _part(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 1 << 40, n)
    names = [None if i % 11 == 0 else f"req{seed}/{i % 97}" for i in range(n)]
    dims = [[int(x), i % 3] if i % 5 else None for i, x in enumerate(rng.integers(0, 9, n))]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names, pa.string()),
            "dims": pa.array(dims, pa.list_(pa.int32())),
            "score": pa.array(rng.normal(size=n)),
            "flag": pa.array(rng.integers(0, 2, n).astype(bool)),
        },
        schema=SCHEMA,
    )


PARTS = [_part(1000, 0), _part(70_000, 1), _part(0, 2), _part(3, 3)]


def _encode(table: pa.Table, **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, SCHEMA, compression="zstd", **options) as w:  # type: ignore[arg-type]
        w.write_table(table, row_group_size=32_768)
    return bytes(sink.getvalue())


def _footer(data: bytes) -> bytes:
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n : -8]


def test_footer_decodes_and_encodes_back_to_the_same_bytes() -> None:
    for part in PARTS:
        data = _encode(part)
        assert encode_struct(decode_footer(data)) == _footer(data)


def test_spliced_file_is_what_one_writer_writes(tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    with pq.ParquetWriter(whole, SCHEMA, compression="zstd") as w:
        for part in PARTS:
            w.write_table(part, row_group_size=32_768)
    spliced = tmp_path / "spliced.parquet"
    out = SplicedWriter(spliced)
    for part in PARTS:
        out.append(_encode(part))
    out.close()
    assert spliced.read_bytes() == whole.read_bytes()
    meta = pq.ParquetFile(spliced).metadata
    assert meta.num_rows == 71_003 and meta.num_row_groups == 1 + 3 + 1 + 1
    assert pq.read_table(spliced).equals(pa.concat_tables(PARTS))


def test_other_schemas_and_nothing_appended_are_refused(tmp_path: Path) -> None:
    out = SplicedWriter(tmp_path / "a.parquet")
    out.append(_encode(PARTS[0]))
    other = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": [1]}), other)
    with pytest.raises(ValueError, match="different schemas"):
        out.append(bytes(other.getvalue()))
    out.abort()
    with pytest.raises(ValueError, match="not a Parquet file"):
        SplicedWriter(tmp_path / "b.parquet").append(b"PAR1 not really")
    # Page indexes hold absolute page offsets that copying would leave pointing elsewhere.
    indexed = SplicedWriter(tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="page indexes"):
        indexed.append(_encode(PARTS[1], write_page_index=True))
    indexed.abort()
    empty = SplicedWriter(tmp_path / "c.parquet")
    with pytest.raises(ValueError, match="no Parquet file"):
        empty.close()
