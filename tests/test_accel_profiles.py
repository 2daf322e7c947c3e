"""accel.profiles: shipped classes carry the public dense-bf16 figures; lookups fail clearly."""

from __future__ import annotations

import pytest

from accel.profiles import PROFILES, get_profile, match_profile


def test_public_figures() -> None:
    h100, h200, v5e = get_profile("h100"), get_profile("h200"), get_profile("tpu-v5e")
    assert h100.peak_dense_bf16_flops == h200.peak_dense_bf16_flops == 989e12
    assert (h100.hbm_bw, h200.hbm_bw) == (3.35e12, 4.8e12)
    assert h100.core_count == 132 and h100.sram_per_core_bytes <= 228 * 1024
    assert (v5e.peak_dense_bf16_flops, v5e.hbm_bw) == (197e12, 819e9)
    assert get_profile("a100").peak_dense_bf16_flops == 312e12
    assert get_profile("mi250").core_count == 208
    a40, a80 = get_profile("a100-40gb"), get_profile("a100-80gb")
    assert (a40.hbm_bw, a80.hbm_bw, a40.hbm_bytes, a80.hbm_bytes) == (
        1.555e12,
        2.039e12,
        40e9,
        80e9,
    )
    assert a40.core_count == a80.core_count == 108
    mi300x, b200 = get_profile("mi300x"), get_profile("b200")
    assert (mi300x.peak_dense_bf16_flops, mi300x.hbm_bw, mi300x.core_count) == (
        1307.4e12,
        5.3e12,
        304,
    )
    assert mi300x.hbm_bytes == 192e9
    assert (b200.peak_dense_bf16_flops, b200.hbm_bw) == (2250e12, 8e12)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profiles_are_sane(name: str) -> None:
    p = PROFILES[name]
    assert p.name == name
    assert p.vector_flops < p.peak_dense_bf16_flops
    assert p.host_link_bw < p.hbm_bw < p.sram_bw
    assert p.onchip_bytes == p.sram_per_core_bytes * p.core_count + p.l2_bytes
    assert p.max_tiles_per_core >= 1 and p.launch_overhead_us > 0


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown hardware profile 'gaudi2'; known: a100-40gb"):
        get_profile("gaudi2")
    assert get_profile("a100").name == "a100-80gb"  # the old name of the 80 GB profile
    assert get_profile(" H100 ").name == "h100"


def test_match_profile_from_trace_device_names() -> None:
    assert match_profile("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert match_profile("NVIDIA A100-SXM4-40GB") == "a100-40gb"  # nsys saxpy export
    assert match_profile("NVIDIA A100 80GB PCIe") == "a100-80gb"
    assert match_profile("AMD Instinct MI300X VF") == "mi300x"  # bert-small MI300X capture
    assert match_profile("NVIDIA H100 80GB HBM3") == "h100"  # bert-small H100 capture
    assert match_profile("NVIDIA B200") == match_profile("NVIDIA GB200") == "b200"
    assert match_profile("NVIDIA H100 80GB HBM3 + AMD Instinct MI300X") is None
    assert match_profile("AMD Instinct MI250X / MI250") == "mi250"
    assert match_profile("NVIDIA H200") == "h200"
    assert match_profile("TPU v5 lite") == "tpu-v5e"
    assert match_profile("Intel Gaudi2") is None
    assert match_profile(None) is None
