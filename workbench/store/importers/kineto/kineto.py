"""PyTorch profiler (Kineto) specifics: the file header and the args keys we decode."""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.store.columns.args import ArgColumns
from workbench.store.columns.packed_text import PackedText
from workbench.store.columns.trace_columns import NO_ARGS
from workbench.store.importers.kineto.chrome_trace import NO_EVENTS

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]

_RAW_EMPTY = msgspec.Raw(b"")


class DeviceProperties(msgspec.Struct):
    id: int | None = None
    name: str | None = None
    numSms: int | None = None  # SMs (NVIDIA) or CUs (AMD)
    totalGlobalMem: int | None = None  # bytes


class DistributedInfo(msgspec.Struct):
    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    nccl_version: str | None = None


Version = int | str | None


class KinetoFile(msgspec.Struct):
    """The object form of a Kineto trace; keys not named here are ignored."""

    # Left raw: the event array is decoded in chunks by chrome_trace.split_events.
    traceEvents: msgspec.Raw = NO_EVENTS
    deviceProperties: list[DeviceProperties] | None = None
    distributedInfo: DistributedInfo | None = None
    cuda_runtime_version: Version = None
    cuda_driver_version: Version = None
    hip_runtime_version: Version = None
    hip_driver_version: Version = None
    rocm_version: Version = None
    host_name: str | None = None
    hostname: str | None = None
    baseTimeNanoseconds: int | None = None


# Absent integer keys decode to this sentinel, so that ids fill numpy arrays without None.
MISSING = -(1 << 63)


class KinetoArgs(msgspec.Struct, gc=False):
    """The args keys we turn into columns; every other key stays in the args text."""

    external_id: int = msgspec.field(default=MISSING, name="External id")
    correlation: int = MISSING
    input_dims: msgspec.Raw = msgspec.field(default=_RAW_EMPTY, name="Input Dims")
    stream: int | str = MISSING
    device: int | str = MISSING
    nbytes: float | None = msgspec.field(default=None, name="bytes")
    flops: float | None = None


def _ids(parsed: list[KinetoArgs], key: str) -> tuple[I64, B1]:
    values = np.fromiter(map(attrgetter(key), parsed), dtype=np.int64, count=len(parsed))
    return values, values != MISSING


def _small_ints(parsed: list[KinetoArgs], key: str) -> pa.Array:
    """stream / device as int32; a string value (ROCm's "0x0") stays in the args text only."""
    try:
        arr = np.fromiter(map(attrgetter(key), parsed), dtype=np.int64, count=len(parsed))
    except (TypeError, ValueError, OverflowError):
        values = list(map(attrgetter(key), parsed))
        arr = np.array([v if v.__class__ is int else MISSING for v in values], dtype=np.int64)
    ok = (arr != MISSING) & (arr >= -(1 << 31)) & (arr < (1 << 31))
    return pa.array(np.where(ok, arr, 0).astype(np.int32), mask=~ok)


def decode_args(
    raws: list[msgspec.Raw], subject: str, text_sink: PackedText | None = None
) -> ArgColumns:
    """Decode only the args keys we need, all events of a chunk in one decoder call.

    With `text_sink` the args text goes there (packed) and the result's text is the sink.
    """
    present = args_present(raws)
    # One JSON array "[a,b,...]" built in C from the raw slices: a single decode call.
    encoded = msgspec.json.encode(raws)
    text = string_column(b"".join(raws), raw_lengths(raws), present)
    return args_columns(encoded, present, text, lambda: raws, text_sink)


def args_present(raws: list[msgspec.Raw]) -> B1:
    """Which events had args (their Raw is not the NO_ARGS default)."""
    return np.fromiter(map(is_not, raws, repeat(NO_ARGS)), dtype=np.bool_, count=len(raws))


def raw_lengths(raws: list[msgspec.Raw]) -> I64:
    """Each Raw's length in bytes."""
    return np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))


def args_columns(
    encoded: bytes,
    present: B1,
    text: pa.StringArray,
    raws: Callable[[], list[msgspec.Raw]],
    text_sink: PackedText | None = None,
) -> ArgColumns:
    """decode_args given the chunk's args as one JSON array, their text column and (called
    only when a value is of an unusual type) the args one by one."""
    try:
        parsed = _ARGS_DECODER.decode(encoded)
    except msgspec.ValidationError:
        parsed = [_lenient(bytes(r)) for r in raws()]
    out_text: pa.Array | PackedText = text
    if text_sink is not None:
        text_sink.add(text)
        out_text = text_sink
    corr, corr_valid = _ids(parsed, "correlation")
    ext, ext_valid = _ids(parsed, "external_id")
    dims = list(map(attrgetter("input_dims"), parsed))
    dim_lengths = raw_lengths(dims)
    # DESIGN §4 spells shapes without blanks ("[[8,96,256],[256,256]]"); Kineto writes ", ".
    shape = string_column(b"".join(dims), dim_lengths, dim_lengths > 0, drop_blanks=True)
    return ArgColumns(
        correlation=corr,
        correlation_valid=corr_valid,
        external_id=ext,
        external_id_valid=ext_valid,
        stream=_small_ints(parsed, "stream"),
        device=_small_ints(parsed, "device"),
        shape=shape,
        nbytes=pa.array(list(map(attrgetter("nbytes"), parsed)), type=pa.float64()),
        flops=pa.array(list(map(attrgetter("flops"), parsed)), type=pa.float64()),
        text=out_text,
    )


_ARGS_DECODER = msgspec.json.Decoder(list[KinetoArgs])


# The blanks of a regular expression's \s (RE2, ASCII): tab, newline, form feed, return, space.
_BLANKS = b"\t\n\f\r "
_IS_BLANK = np.zeros(256, dtype=np.bool_)
_IS_BLANK[list(_BLANKS)] = True


def string_column(
    joined: bytes | pa.Buffer, lengths: I64, present: B1, drop_blanks: bool = False
) -> pa.Array:
    """Values joined end to end (their lengths given) as one string column built on that one
    buffer (no copies); `drop_blanks` removes every blank (those of a regular expression's \\s)
    from the values."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if drop_blanks:
        joined = joined if isinstance(joined, bytes) else joined.to_pybytes()
        blank_at = np.flatnonzero(_IS_BLANK[np.frombuffer(joined, dtype=np.uint8)])
        if blank_at.size:
            # Each offset moves back by the blanks before it (found among the few blanks, not
            # counted over every byte).
            offsets -= np.searchsorted(blank_at, offsets)
            joined = joined.translate(None, _BLANKS)
    # Null slots keep their bytes ("{}" of an event without args); the validity bitmap hides them.
    data = joined if isinstance(joined, pa.Buffer) else pa.py_buffer(joined)
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    null_count = int(len(lengths) - present.sum())
    if offsets[-1] >= (1 << 31) - 1:
        # A decode chunk is a few MB, so its args text cannot reach 2 GiB.
        raise ValueError("args text of one chunk exceeds 2 GiB")
    return pa.StringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets.astype(np.int32)), data, validity, null_count
    )


def _lenient(text: bytes) -> KinetoArgs:
    """Args of an unusual type (a string correlation, say) are left in the text only."""
    try:
        return msgspec.json.decode(text, type=KinetoArgs)
    except msgspec.MsgspecError:
        return KinetoArgs()


def _version(v: Version) -> str | None:
    return None if v is None else str(v)


def run_metadata(header: KinetoFile | None) -> dict[str, Any]:
    """runs-row fields the header states; what it does not state stays absent (null)."""
    out: dict[str, Any] = {}
    if header is None:
        return out
    devices = header.deviceProperties or []
    names = sorted({d.name for d in devices if d.name})
    if names:
        out["hardware"] = " + ".join(names)
    if devices:
        out["device_count"] = len(devices)
    dist = header.distributedInfo
    if dist is not None:
        if dist.rank is not None:
            out["rank"] = dist.rank
        if dist.world_size is not None:
            out["world_size"] = dist.world_size
    if header.cuda_runtime_version is not None:
        out["runtime"] = "cuda"
        out["runtime_version"] = _version(header.cuda_runtime_version)
    elif header.hip_runtime_version is not None or header.rocm_version is not None:
        out["runtime"] = "rocm"
        out["runtime_version"] = _version(header.hip_runtime_version or header.rocm_version)
    driver = header.cuda_driver_version or header.hip_driver_version
    if driver is not None:
        out["driver_version"] = _version(driver)
    host = header.host_name or header.hostname
    if host:
        out["host"] = host
    return out
