"""The verdict's second readings (equal traffic, queue-free tail, change of load): the key the
triage verdict sets, the metric its impact rows carry and the words that name it."""

from __future__ import annotations

from typing import Final

# The impact rows of the gaps at equal traffic (summary.py), when the verdict fired on them.
EQUAL_METRIC: Final[str] = "end-to-end at equal traffic"
# Those of the queue-free tail (latency minus the waits for a busy server), when the verdict
# fired on it.
QUEUE_FREE_METRIC: Final[str] = "queue-free tail"
# Those of the change of load (the comparator's service at both runs' arrival rates), when the
# verdict fired on it.
LOAD_METRIC: Final[str] = "end-to-end at the failing run's load"
# The verdict's second readings: the triage verdict's key, the impact rows' metric, the words
# that name it and what it reads.
READINGS: Final[tuple[tuple[str, str, str, str], ...]] = (
    ("equal_traffic", EQUAL_METRIC, "at equal traffic", "both services on the same arrivals"),
    (
        "queue_free_tail",
        QUEUE_FREE_METRIC,
        "in the queue-free tail",
        "each request's latency minus its waits for a server busy with other requests",
    ),
    (
        "load_change",
        LOAD_METRIC,
        "at the failing run's load",
        "the comparator's service replayed at the failing run's arrival rate and at its own",
    ),
)
