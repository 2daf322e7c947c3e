"""Hardware profiles of the accelerator model, as data (DESIGN §5).

Figures are public vendor numbers for dense (not 2:4-sparse) bf16 and are cited per profile.
Values marked "estimate" are not on a datasheet: they are engineering assumptions of this model
(kernel launch cost, on-chip bandwidth, occupancy limit) and are meant to be tuned by calibration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

KB: Final = 1024
MB: Final = 1024 * 1024
GB: Final = 10**9  # bandwidth figures on datasheets are decimal
TB: Final = 10**12


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator class; rates are per device, capacities in bytes, bandwidths in bytes/s."""

    name: str
    peak_dense_bf16_flops: float  # matrix-unit peak, FLOP/s
    vector_flops: float  # non-matrix (SIMT / vector unit) peak, FLOP/s
    hbm_bw: float
    core_count: int  # parallel tile executors: SMs, CUs, MXUs
    sram_per_core_bytes: int  # software-managed on-chip memory per core (smem / LDS / VMEM share)
    l2_bytes: int
    launch_overhead_us: float  # host-side cost of one kernel / fused-program launch
    host_link_bw: float  # host <-> device, one direction
    sram_bw: float  # aggregate on-chip (shared memory / VMEM) bandwidth
    max_tiles_per_core: int = 2  # co-resident tiles per core before SRAM runs out (occupancy cap)
    hbm_bytes: int = 0

    @property
    def onchip_bytes(self) -> int:
        """On-chip capacity a fused group can keep resident: SRAM of every core plus L2."""
        return self.sram_per_core_bytes * self.core_count + self.l2_bytes


PROFILES: Final[dict[str, HardwareProfile]] = {
    # NVIDIA H100 SXM5: datasheet "H100 Tensor Core GPU" — 989 TFLOP/s bf16 dense (1,979 sparse),
    # FP32 67 TFLOP/s (vector), 3.35 TB/s HBM3, 80 GB; Hopper whitepaper: 132 SMs, up to 228 KB
    # shared memory per SM, 50 MB L2. Host: PCIe Gen5 x16, 64 GB/s per direction.
    # Estimates: launch 4 us; smem bandwidth 128 B/clk/SM x 132 SMs x ~1.75 GHz ~ 29.6 TB/s.
    "h100": HardwareProfile(
        name="h100",
        peak_dense_bf16_flops=989e12,
        vector_flops=67e12,
        hbm_bw=3.35 * TB,
        core_count=132,
        sram_per_core_bytes=228 * KB,
        l2_bytes=50 * MB,
        launch_overhead_us=4.0,
        host_link_bw=64 * GB,
        sram_bw=29.6 * TB,
        max_tiles_per_core=2,
        hbm_bytes=80 * GB,
    ),
    # NVIDIA H200 SXM: datasheet "H200 Tensor Core GPU" — 989 TFLOP/s bf16 dense, FP32 67 TFLOP/s,
    # 4.8 TB/s HBM3e, 141 GB; same Hopper die as H100 (132 SMs, 228 KB smem/SM, 50 MB L2).
    # Host: PCIe Gen5 x16, 64 GB/s per direction. Estimates as for h100.
    "h200": HardwareProfile(
        name="h200",
        peak_dense_bf16_flops=989e12,
        vector_flops=67e12,
        hbm_bw=4.8 * TB,
        core_count=132,
        sram_per_core_bytes=228 * KB,
        l2_bytes=50 * MB,
        launch_overhead_us=4.0,
        host_link_bw=64 * GB,
        sram_bw=29.6 * TB,
        max_tiles_per_core=2,
        hbm_bytes=141 * GB,
    ),
    # Google Cloud TPU v5e: Cloud TPU docs "TPU v5e" — one TensorCore per chip with 4 MXUs, a
    # vector unit and a scalar unit; 197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s.
    # The 4 MXUs are the parallel tile executors here (core_count=4).
    # Estimates: VMEM 128 MiB shared by the MXUs (32 MiB per MXU share), no separate L2;
    # vector unit ~1/8 of matrix peak; launch (program dispatch) 10 us; host link PCIe Gen4 x16
    # 32 GB/s per direction (the v5e page gives no host-link figure); VMEM bandwidth 20 TB/s;
    # one resident tile per MXU (systolic arrays do not interleave tiles).
    "tpu-v5e": HardwareProfile(
        name="tpu-v5e",
        peak_dense_bf16_flops=197e12,
        vector_flops=197e12 / 8,
        hbm_bw=819 * GB,
        core_count=4,
        sram_per_core_bytes=32 * MB,
        l2_bytes=0,
        launch_overhead_us=10.0,
        host_link_bw=32 * GB,
        sram_bw=20 * TB,
        max_tiles_per_core=1,
        hbm_bytes=16 * GB,
    ),
    # NVIDIA A100 80GB SXM: datasheet "NVIDIA A100 Tensor Core GPU" (2021) — 312 TFLOP/s bf16
    # dense, FP32 19.5 TFLOP/s, 2,039 GB/s HBM2e, 80 GB; Ampere (GA100) whitepaper: 108 SMs, up to
    # 164 KB shared memory per SM, 40 MB L2. Host: PCIe Gen4 x16, 32 GB/s per direction.
    # Estimates: launch 4 us; smem bandwidth 128 B/clk/SM x 108 x 1.41 GHz ~ 19.5 TB/s.
    "a100-80gb": HardwareProfile(
        name="a100-80gb",
        peak_dense_bf16_flops=312e12,
        vector_flops=19.5e12,
        hbm_bw=2039 * GB,
        core_count=108,
        sram_per_core_bytes=164 * KB,
        l2_bytes=40 * MB,
        launch_overhead_us=4.0,
        host_link_bw=32 * GB,
        sram_bw=19.5 * TB,
        max_tiles_per_core=2,
        hbm_bytes=80 * GB,
    ),
    # NVIDIA A100 40GB SXM: the same datasheet — 312 TFLOP/s bf16 dense, FP32 19.5 TFLOP/s,
    # 1,555 GB/s HBM2, 40 GB; same GA100 die (108 SMs, 164 KB smem/SM, 40 MB L2). Nsight Systems
    # reports exactly this device on tests' saxpy export: 108 SMs, 1,555.2 GB/s. Estimates as for
    # a100-80gb.
    "a100-40gb": HardwareProfile(
        name="a100-40gb",
        peak_dense_bf16_flops=312e12,
        vector_flops=19.5e12,
        hbm_bw=1555 * GB,
        core_count=108,
        sram_per_core_bytes=164 * KB,
        l2_bytes=40 * MB,
        launch_overhead_us=4.0,
        host_link_bw=32 * GB,
        sram_bw=19.5 * TB,
        max_tiles_per_core=2,
        hbm_bytes=40 * GB,
    ),
    # NVIDIA B200 (HGX B200): NVIDIA HGX B200 datasheet — 4.5 PFLOP/s FP16/BF16 with sparsity per
    # GPU, so 2.25 PFLOP/s dense; HBM3e 8 TB/s, 180 GB per GPU (1.44 TB per 8-GPU board).
    # Estimates (not on the datasheet): 148 SMs and 228 KB smem/SM (Blackwell as reported by
    # CUDA device queries, two dies), L2 126 MB, FP32 vector ~75 TFLOP/s, host PCIe Gen5 x16
    # 64 GB/s, launch 4 us, smem bandwidth 128 B/clk/SM x 148 x ~1.9 GHz ~ 36 TB/s.
    "b200": HardwareProfile(
        name="b200",
        peak_dense_bf16_flops=2250e12,
        vector_flops=75e12,
        hbm_bw=8.0 * TB,
        core_count=148,
        sram_per_core_bytes=228 * KB,
        l2_bytes=126 * MB,
        launch_overhead_us=4.0,
        host_link_bw=64 * GB,
        sram_bw=36 * TB,
        max_tiles_per_core=2,
        hbm_bytes=180 * GB,
    ),
    # AMD Instinct MI300X (OAM): AMD datasheet "AMD Instinct MI300X Accelerator" — 1,307.4 TFLOP/s
    # bf16 dense (2,614.9 with sparsity), FP32 vector 81.7 TFLOP/s, 5.3 TB/s HBM3, 192 GB,
    # 304 CUs, 256 MB AMD Infinity Cache; CDNA 3 whitepaper: 64 KB LDS per CU, 4 MB L2 per XCD
    # (8 XCDs). Host: PCIe Gen5 x16, 64 GB/s per direction. The Infinity Cache (memory-side) is not
    # counted as on-chip capacity here, only the 32 MB of L2. Kineto reports 304 SMs (numSms) and
    # 206,141,652,992 B of global memory for it (tests' serving captures).
    # Estimates: launch 6 us; LDS bandwidth 128 B/clk/CU x 304 x 2.1 GHz ~ 81.7 TB/s.
    "mi300x": HardwareProfile(
        name="mi300x",
        peak_dense_bf16_flops=1307.4e12,
        vector_flops=81.7e12,
        hbm_bw=5.3 * TB,
        core_count=304,
        sram_per_core_bytes=64 * KB,
        l2_bytes=32 * MB,
        launch_overhead_us=6.0,
        host_link_bw=64 * GB,
        sram_bw=81.7 * TB,
        max_tiles_per_core=2,
        hbm_bytes=192 * GB,
    ),
    # AMD Instinct MI250 (OAM, both GCDs as one device): AMD product page — 362.1 TFLOP/s bf16
    # dense, FP32 vector 45.3 TFLOP/s, 3.2 TB/s HBM2e, 128 GB; 208 CUs (2 x 104), 64 KB LDS per CU,
    # 8 MB L2 per GCD. Host: PCIe Gen4 x16, 32 GB/s per direction.
    # Estimates: launch 6 us; LDS bandwidth 128 B/clk/CU x 208 x 1.7 GHz ~ 45 TB/s.
    "mi250": HardwareProfile(
        name="mi250",
        peak_dense_bf16_flops=362.1e12,
        vector_flops=45.3e12,
        hbm_bw=3.2 * TB,
        core_count=208,
        sram_per_core_bytes=64 * KB,
        l2_bytes=16 * MB,
        launch_overhead_us=6.0,
        host_link_bw=32 * GB,
        sram_bw=45 * TB,
        max_tiles_per_core=2,
        hbm_bytes=128 * GB,
    ),
}


# Older names of a profile, still accepted by get_profile.
ALIASES: Final[dict[str, str]] = {"a100": "a100-80gb"}


def get_profile(name: str) -> HardwareProfile:
    """The profile called `name` (case-insensitive); ValueError naming the known ones otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in PROFILES:
        raise ValueError(f"unknown hardware profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[key]


# Patterns of device names as traces report them ("NVIDIA A100-SXM4-40GB", "AMD Instinct MI300X
# VF", "NVIDIA H100 80GB HBM3", "TPU v5 lite"), tried in this order so that a longer match wins
# ("a100 ... 40gb" before any other A100, "h200" before "h100").
_DEVICE_HINTS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(p), name)
    for p, name in (
        (r"\bg?b200\b", "b200"),
        (r"\bh200\b", "h200"),
        (r"\bh100\b", "h100"),
        (r"\ba100\b.*\b40\s*gb\b", "a100-40gb"),
        (r"\ba100\b", "a100-80gb"),
        (r"\bmi300x\b", "mi300x"),
        (r"\bmi250x?\b", "mi250"),
        (r"\bv5e\b|\bv5 ?lite", "tpu-v5e"),
    )
)


def match_profile(hardware: str | None) -> str | None:
    """Profile name for a run's device name (the runs row's hardware), or None when no shipped
    profile matches. Several devices joined by " + " match only when they all name one profile."""
    if not hardware:
        return None
    names = {_match_one(part) for part in hardware.lower().split(" + ")}
    return names.pop() if len(names) == 1 else None


def _match_one(device: str) -> str | None:
    for pattern, name in _DEVICE_HINTS:
        if pattern.search(device):
            return name
    return None
