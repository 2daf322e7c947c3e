"""Per-op cost model, vectorized over every op of every request of a run (DESIGN §5).
Imports numpy and the rest of accel only.

An op is *modelled* when it carries flops or bytes; otherwise its observed time is used as is.
For a modelled op, in microseconds:

  compute c: matrix-unit ops (tiled, or >= `matrix_min_flops_per_output` flops per output
      element) run at the bf16 peak, others and mapping fallbacks at the vector rate. Tiled ops
      pay tile quantization (ceil(M/tm) * ceil(N/tn) tiles of tm*tn outputs, padding included)
      and wave quantization (tiles run in waves of core_count * occupancy slots, occupancy =
      tiles whose staging buffers fit a core's SRAM, capped by the profile).
  memory m: bytes at the bandwidth of their tier (sram / hbm / host link; unknown = hbm) plus
      spill traffic at HBM bandwidth: a fused group (ops of one request sharing a fusion group)
      whose working set (sum of its ops' bytes) exceeds the on-chip capacity spills the excess
      (written and read back), charged to its ops in proportion to their bytes.
  t = c + m - rho * min(c, m)  (partial overlap), plus one launch overhead per fused group
      (charged to its first modelled op) or per unfused op.
"""

from accel.cost.model import (
    DEFAULT_PARAMS,
    CostParams,
    OpCost,
    TilePlan,
    group_instance,
    op_times,
    tile_plan,
)
from accel.cost.retime import RETIMED_PART, retimed

__all__ = [
    "DEFAULT_PARAMS",
    "RETIMED_PART",
    "CostParams",
    "OpCost",
    "TilePlan",
    "group_instance",
    "op_times",
    "retimed",
    "tile_plan",
]
