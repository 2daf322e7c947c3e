"""A string column held LZ4-compressed, chunk by chunk, until it is written.

The args text of a real-shaped trace is half its bytes (~108 MB of a 209 MB file) and only
the events file needs it: decoding hands each chunk's text here, a thread compresses it beside
the decoder (the codec releases the GIL: the second core does it), attribution runs without it,
and the writer unpacks one row group's rows at a time. The text compresses ~10x, so the
import's peak holds ~11 MB of it instead of all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

B1 = npt.NDArray[np.bool_]

# LZ4 frames: ~2x the compression speed of zstd level 1 and ~10x faster to unpack, at twice
# the size (11 vs 5 MB for the 108 MB of args text of the 209 MB trace).
_CODEC = pa.Codec("lz4")


def _pack(data: pa.Buffer) -> pa.Buffer:
    # The codec's output buffer keeps its worst-case size (as large as the input): the bytes
    # copy is the compressed size, and the big buffer goes back at once.
    return pa.py_buffer(_CODEC.compress(data, asbytes=True))


@dataclass
class PackedChunk:
    """One decoded chunk's string array with its character data compressed."""

    n: int  # rows before `keep`
    offsets: pa.Buffer
    validity: pa.Buffer | None
    null_count: int
    raw_size: int
    data: Future[pa.Buffer] | pa.Buffer
    keep: B1 | None = None  # rows kept of the chunk (None: all)

    @property
    def rows(self) -> int:
        return self.n if self.keep is None else int(self.keep.sum())

    def unpack(self) -> pa.StringArray:
        data = self.data.result() if isinstance(self.data, Future) else self.data
        raw = _CODEC.decompress(data, decompressed_size=self.raw_size) if self.raw_size else data
        arr = pa.StringArray.from_buffers(self.n, self.offsets, raw, self.validity, self.null_count)
        return arr if self.keep is None else arr.filter(pa.array(self.keep))


def pack_now(arr: pa.StringArray) -> PackedChunk:
    """arr packed on this thread (a process that decodes args for another packs them so)."""
    return _chunk(arr, _pack)


def _chunk(
    arr: pa.StringArray, pack: Callable[[pa.Buffer], Future[pa.Buffer] | pa.Buffer]
) -> PackedChunk:
    """arr (unsliced) as a chunk whose characters `pack` compresses (now, or as a future)."""
    if arr.offset:
        raise ValueError("PackedText takes unsliced arrays")
    validity, offsets, data = arr.buffers()
    assert offsets is not None
    size = data.size if data is not None else 0
    packed = pack(data) if data is not None and size else pa.py_buffer(b"")
    return PackedChunk(len(arr), offsets, validity, arr.null_count, size, packed)


class PackedText:
    """Chunks of one string column, compressed on a background thread as they are added."""

    def __init__(self) -> None:
        self._chunks: list[PackedChunk] = []
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(1, "pack-text")

    def add(self, arr: pa.StringArray) -> None:
        """Append a chunk (an unsliced string array); its characters are packed meanwhile."""
        pool = self._pool
        if pool is None:
            raise RuntimeError("PackedText is closed: no more chunks")
        self._chunks.append(_chunk(arr, lambda data: pool.submit(_pack, data)))

    def add_packed(self, chunk: PackedChunk) -> None:
        """Append a chunk packed elsewhere (pack_now)."""
        if self._pool is None:
            raise RuntimeError("PackedText is closed: no more chunks")
        self._chunks.append(chunk)

    def close(self) -> None:
        """Wait for the packing to finish (errors surface here) and stop its thread."""
        if self._pool is None:
            return
        self._pool.shutdown(wait=True)
        self._pool = None
        for c in self._chunks:
            if isinstance(c.data, Future):
                c.data = c.data.result()

    def __len__(self) -> int:
        return sum(c.rows for c in self._chunks)

    @property
    def nbytes(self) -> int:
        """Bytes held: the compressed characters, offsets and validity (after close)."""
        total = 0
        for c in self._chunks:
            data = c.data if isinstance(c.data, pa.Buffer) else None
            total += c.offsets.size + (c.validity.size if c.validity else 0)
            total += data.size if data is not None else c.raw_size
        return total

    def filter(self, keep: B1) -> PackedText:
        """The rows where keep is true (applied when unpacked; the packed bytes are shared)."""
        self.close()
        out = PackedText()
        out.close()
        start = 0
        for c in self._chunks:
            rows = c.rows
            part = keep[start : start + rows]
            start += rows
            if c.keep is not None:
                mask = c.keep.copy()
                mask[mask] = part
            else:
                mask = part.copy()
            out._chunks.append(
                PackedChunk(c.n, c.offsets, c.validity, c.null_count, c.raw_size, c.data, mask)
            )
        if start != len(keep):
            raise ValueError(f"keep has {len(keep)} rows, the column {start}")
        return out

    def rows(self, start: int, stop: int) -> pa.ChunkedArray:
        """Rows [start, stop) unpacked (only the chunks they fall in)."""
        wanted: list[tuple[PackedChunk, int, int]] = []
        at = 0
        for c in self._chunks:
            rows = c.rows
            lo, hi = max(start - at, 0), min(stop - at, rows)
            if lo < hi:
                wanted.append((c, lo, hi))
            at += rows
            if at >= stop:
                break
        # Two threads: the codec releases the GIL, and the fresh pages it fills (the costly
        # part: faulting them in) are shared out over both cores.
        with ThreadPoolExecutor(2, "unpack-text") as pool:
            arrays = list(pool.map(lambda w: w[0].unpack(), wanted))
        pieces = [
            arr if (lo, hi) == (0, c.rows) else arr.slice(lo, hi - lo)
            for arr, (c, lo, hi) in zip(arrays, wanted, strict=True)
        ]
        return pa.chunked_array(pieces, type=pa.string())
