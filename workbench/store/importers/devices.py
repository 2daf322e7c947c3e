"""The device description an importer can state beside the runs row's hardware name (SM or CU
count, memory size and bandwidth: the runs row's device_* columns) and the matching profile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel.profiles import match_profile


def device_meta(
    sm_counts: Sequence[int | None],
    memory_bytes: Sequence[int | None],
    bandwidth_bytes_s: Sequence[float | None] = (),
) -> dict[str, Any]:
    """runs-row device_* fields of the first device that states each; absent stays absent."""

    def first(values: Sequence[Any]) -> Any:
        return next((v for v in values if v), None)

    out = {
        "device_sm_count": first(sm_counts),
        "device_memory_gb": round(m / 1e9, 1) if (m := first(memory_bytes)) else None,
        "device_memory_bandwidth_gbs": (
            round(b / 1e9, 1) if (b := first(bandwidth_bytes_s)) else None
        ),
    }
    return {k: v for k, v in out.items() if v is not None}


def profile_line(hardware: str | None) -> str | None:
    """ "NVIDIA A100-SXM4-40GB (profile a100-40gb)", or without a profile when none matches."""
    if not hardware:
        return None
    name = match_profile(hardware)
    return f"{hardware} (profile {name})" if name else f"{hardware} (no hardware profile matches)"
