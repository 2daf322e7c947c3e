"""All-null Arrow columns whose buffers stay untouched: the schema's columns a trace does not fill.

pa.nulls writes out zeroed buffers (an int64 column of 5M nulls is 40 MB of resident memory).
Here the buffers are numpy zeros, which the C library takes as fresh zero pages from the system
when large and nobody reads: a null slot's value is never looked at, so they stay unresident.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _zeros(n_bytes: int) -> pa.Buffer:
    return pa.py_buffer(np.zeros(max(n_bytes, 1), dtype=np.uint8))


def nulls(n: int, type_: pa.DataType) -> pa.Array:
    """n nulls of type_ (pa.nulls for the types this does not lay out itself)."""
    if n <= 0:
        return pa.nulls(max(n, 0), type_)
    validity = _zeros((n + 7) // 8)
    if pa.types.is_string(type_) or pa.types.is_binary(type_):
        return pa.Array.from_buffers(type_, n, [validity, _zeros(4 * (n + 1)), _zeros(0)], n)
    if (pa.types.is_integer(type_) or pa.types.is_floating(type_)) and type_.bit_width % 8 == 0:
        return pa.Array.from_buffers(type_, n, [validity, _zeros(n * type_.bit_width // 8)], n)
    return pa.nulls(n, type_)
