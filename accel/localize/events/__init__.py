"""Evidence read off the trace's own events: the witnesses each mechanism rests on
(witness.py), recompiles and graph breaks (lowering_events.py), and a stage's observed time
where the cost model predicts none of it (observed_swap.py). Imports numpy and accel only."""
