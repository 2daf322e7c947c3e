"""numpy accelerator model: profiles, cost model, queueing, replay, localization, synthetic runs."""
