"""numpy accelerator model: profiles, cost model, queueing, replay, localization, synthetic runs.
Imports numpy and the standard library only."""
