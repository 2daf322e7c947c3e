"""Localization of a tail regression: which stage first went wrong, and by which mechanism.
Imports numpy and the rest of accel only.

The method, one file per step: trigger (is there a regression), requeue (the queue and batch
re-run), swaps + batching + matching (plan-swap counterfactuals), residuals (cost-model residual
shifts), mechanism, confidence, and verdict (which puts them together; its docstring has the
order of the steps). This module re-exports the public API.
"""

from accel.localize.gaps import QNAMES, QS
from accel.localize.matching import SwapInputs, group_medians, swap_inputs
from accel.localize.records import Claim, Localization
from accel.localize.requeue import QueueState, observed_queue, requeue
from accel.localize.residuals import (
    SUMMARY_QNAMES,
    SUMMARY_QS,
    Replayed,
    replay_summary,
    replayed,
)
from accel.localize.swaps import comparator_shares, prepare_swaps
from accel.localize.trigger import OUTCOMES, Trigger, TriggerPolicy
from accel.localize.verdict import METHODS, N_BOOT, PLAN_STAGES, localize

__all__ = [
    "METHODS",
    "N_BOOT",
    "OUTCOMES",
    "PLAN_STAGES",
    "QNAMES",
    "QS",
    "SUMMARY_QNAMES",
    "SUMMARY_QS",
    "Claim",
    "Localization",
    "QueueState",
    "Replayed",
    "SwapInputs",
    "Trigger",
    "TriggerPolicy",
    "comparator_shares",
    "group_medians",
    "localize",
    "observed_queue",
    "prepare_swaps",
    "replay_summary",
    "replayed",
    "requeue",
    "swap_inputs",
]
