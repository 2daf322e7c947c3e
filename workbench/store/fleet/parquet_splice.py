"""Parquet files joined into one without decoding them: their row groups' bytes copied as they
are, one footer made of theirs with the offsets moved to where the bytes landed.

A fleet import's workers each encode one file's tables as a whole Parquet file (bytes); the
parent only appends them here, so the run keeps one part file per table and the parent does no
encoding. The footer is Thrift compact protocol (parquet.thrift); it is decoded into a generic
tree that keeps every field, so re-encoding an unchanged footer gives back the same bytes.
Encrypted files, and files with page indexes (their page locations are absolute offsets
inside the index bytes, which are copied, not rewritten), are refused; the store writes neither.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Union

MAGIC: Final[bytes] = b"PAR1"

# Compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(
    13
)
_INTS = (_BYTE, _I16, _I32, _I64)

# parquet.thrift field ids of what holds an absolute file offset, or is renumbered.
_FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_ENCRYPTION = 3, 4, 8
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_CRYPTO = 2, 3, 8
_RG_OFFSETS: Final[frozenset[int]] = frozenset({_RG_FILE_OFFSET})
_CC_OFFSETS: Final[frozenset[int]] = frozenset({_CC_FILE_OFFSET})
_CC_PAGE_INDEX: Final[frozenset[int]] = frozenset({4, 6})  # offset index, column index
# ColumnMetaData: data_page_offset, index_page_offset, dictionary_page_offset, bloom filter
# (a bloom filter's bytes hold no offsets: it moves as a whole).
_CMD_OFFSETS: Final[frozenset[int]] = frozenset({9, 10, 11, 14})


@dataclass
class Field:
    fid: int
    ctype: int
    value: Value


@dataclass
class Struct:
    fields: list[Field]

    def get(self, fid: int) -> Field | None:
        return next((f for f in self.fields if f.fid == fid), None)


@dataclass
class Seq:
    ctype: int  # LIST or SET
    etype: int
    items: list[Value]


@dataclass
class Raw:
    """A value already encoded (a row group kept as bytes until the footer is written)."""

    data: bytes


@dataclass
class Map:
    ktype: int
    vtype: int
    items: list[tuple[Value, Value]]


Value = Union[int, float, bool, bytes, Struct, Seq, Map, Raw]  # noqa: UP007 - names defined above


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ctype: int) -> Value:
        if ctype in (_TRUE, _FALSE):  # a list element: one byte
            return self.byte() == _TRUE
        if ctype == _BYTE:
            return struct.unpack("b", bytes([self.byte()]))[0]  # type: ignore[no-any-return]
        if ctype in _INTS:
            return self.zigzag()
        if ctype == _DOUBLE:
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8 : self.pos])[0]  # type: ignore[no-any-return]
        if ctype == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n : self.pos]
        if ctype in (_LIST, _SET):
            head = self.byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return Seq(ctype, etype, [self.value(etype) for _ in range(size)])
        if ctype == _MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            kt, vt = kv >> 4, kv & 0x0F
            return Map(kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])
        if ctype == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown Thrift compact type {ctype}")

    def struct(self) -> Struct:
        fields: list[Field] = []
        last = 0
        while True:
            head = self.byte()
            ctype = head & 0x0F
            if ctype == _STOP:
                return Struct(fields)
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            if ctype in (_TRUE, _FALSE):
                fields.append(Field(fid, ctype, ctype == _TRUE))
            else:
                fields.append(Field(fid, ctype, self.value(ctype)))
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while n > 0x7F:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, ctype: int, v: Value) -> None:
        if isinstance(v, Raw):
            self.out += v.data
        elif ctype in (_TRUE, _FALSE):
            self.out.append(_TRUE if v else _FALSE)
        elif ctype == _BYTE:
            assert isinstance(v, int)
            self.out += struct.pack("b", v)
        elif ctype in _INTS:
            assert isinstance(v, int)
            self.zigzag(v)
        elif ctype == _DOUBLE:
            assert isinstance(v, float)
            self.out += struct.pack("<d", v)
        elif ctype == _BINARY:
            assert isinstance(v, bytes)
            self.varint(len(v))
            self.out += v
        elif ctype in (_LIST, _SET):
            assert isinstance(v, Seq)
            n = len(v.items)
            if n < 15:
                self.out.append(n << 4 | v.etype)
            else:
                self.out.append(0xF0 | v.etype)
                self.varint(n)
            for item in v.items:
                self.value(v.etype, item)
        elif ctype == _MAP:
            assert isinstance(v, Map)
            self.varint(len(v.items))
            if v.items:
                self.out.append(v.ktype << 4 | v.vtype)
            for k, x in v.items:
                self.value(v.ktype, k)
                self.value(v.vtype, x)
        elif ctype == _STRUCT:
            assert isinstance(v, Struct)
            self.struct(v)
        else:
            raise ValueError(f"unknown Thrift compact type {ctype}")

    def struct(self, s: Struct) -> None:
        last = 0
        for f in s.fields:
            ctype = (_TRUE if f.value else _FALSE) if f.ctype in (_TRUE, _FALSE) else f.ctype
            delta = f.fid - last
            if 0 < delta <= 15:
                self.out.append(delta << 4 | ctype)
            else:
                self.out.append(ctype)
                self.zigzag(f.fid)
            if ctype not in (_TRUE, _FALSE):
                self.value(ctype, f.value)
            last = f.fid
        self.out.append(_STOP)


def decode_footer(data: bytes) -> Struct:
    """The FileMetaData of Parquet file bytes."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise ValueError("not a Parquet file (or an encrypted one)")
    n = struct.unpack("<I", data[-8:-4])[0]
    return _Reader(data[len(data) - 8 - n : -8]).struct()


def encode_struct(s: Struct) -> bytes:
    """A Thrift struct in compact protocol: a footer, or one of its row groups."""
    w = _Writer()
    w.struct(s)
    return bytes(w.out)


def _shift(s: Struct, fids: frozenset[int], by: int) -> None:
    for f in s.fields:
        # 0 is no offset (bytes 0-3 are the magic): what writers put in the deprecated
        # ColumnChunk.file_offset, and in the page offsets of an empty row group.
        if f.fid in fids and isinstance(f.value, int) and f.value > 0:
            f.value += by


def _row_groups(meta: Struct) -> list[Struct]:
    rgs = meta.get(_FMD_ROW_GROUPS)
    assert rgs is not None and isinstance(rgs.value, Seq)
    return [rg for rg in rgs.value.items if isinstance(rg, Struct)]


class SplicedWriter:
    """One Parquet file at `path` made of whole Parquet files appended in order (same schema).
    Rows read back as those of the files one after the other, row groups as they were."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._fh.write(MAGIC)
        self._pos = len(MAGIC)
        self._first: Struct | None = None
        self._schema = b""
        # Each row group re-encoded as it comes: the writer's memory stays a few bytes a file.
        self._groups: list[Value] = []
        self._rows = 0

    def append(self, data: bytes) -> None:
        """Add the row groups of one Parquet file (its bytes)."""
        meta = decode_footer(data)
        if meta.get(_FMD_ENCRYPTION) is not None:
            raise ValueError("encrypted Parquet files are not spliced")
        schema = encode_struct(Struct([f for f in meta.fields if f.fid == 2]))
        if self._first is None:
            self._first, self._schema = meta, schema
        elif schema != self._schema:
            raise ValueError("Parquet files of different schemas cannot be spliced")
        body_end = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
        by = self._pos - len(MAGIC)  # where this file's byte 4 lands
        for rg in _row_groups(meta):
            _shift(rg, _RG_OFFSETS, by)
            ordinal = rg.get(_RG_ORDINAL)
            if ordinal is not None:
                ordinal.value = len(self._groups)
            cols = rg.get(_RG_COLUMNS)
            assert cols is not None and isinstance(cols.value, Seq)
            for cc in cols.value.items:
                assert isinstance(cc, Struct)
                if cc.get(_CC_CRYPTO) is not None:
                    raise ValueError("encrypted Parquet files are not spliced")
                if any(f.fid in _CC_PAGE_INDEX for f in cc.fields):
                    raise ValueError("Parquet files with page indexes are not spliced")
                _shift(cc, _CC_OFFSETS, by)
                cmd = cc.get(_CC_META)
                if cmd is not None:
                    assert isinstance(cmd.value, Struct)
                    _shift(cmd.value, _CMD_OFFSETS, by)
            self._groups.append(Raw(encode_struct(rg)))
        num_rows = meta.get(_FMD_NUM_ROWS)
        assert num_rows is not None and isinstance(num_rows.value, int)
        self._rows += num_rows.value
        self._fh.write(memoryview(data)[len(MAGIC) : body_end])
        self._pos += body_end - len(MAGIC)

    def close(self) -> None:
        """Write the joined footer and fsync the file."""
        if self._first is None:
            self._fh.close()
            raise ValueError(f"{self.path}: no Parquet file was appended")
        fields = []
        for f in self._first.fields:
            if f.fid == _FMD_NUM_ROWS:
                f = Field(f.fid, f.ctype, self._rows)
            elif f.fid == _FMD_ROW_GROUPS:
                f = Field(f.fid, f.ctype, Seq(_LIST, _STRUCT, list(self._groups)))
            fields.append(f)
        footer = encode_struct(Struct(fields))
        self._fh.write(footer + struct.pack("<I", len(footer)) + MAGIC)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def abort(self) -> None:
        """Close without a footer (the caller removes the file)."""
        self._fh.close()
