"""The stable Python API: `workbench.open(store)` -> Workspace (runs, compare, ingest) ->
Comparison (verdict, stages, tail_drivers, proof, request, to_json, to_perfetto, attach).
Imports store, triage and incident; never cli or tui. Computing writes nothing; ingest and
attach are the calls that write.

Stable: the names in __all__, their documented arguments, and the columns of their frames.
"""

from workbench.api.comparison import Comparison
from workbench.api.records import Gap, RequestPair, RequestStages, Verdict
from workbench.api.workspace import Workspace, trigger_policy
from workbench.api.workspace import open_store as open
from workbench.errors import WorkbenchError

__all__ = [
    "Comparison",
    "Gap",
    "RequestPair",
    "RequestStages",
    "Verdict",
    "WorkbenchError",
    "Workspace",
    "open",
    "trigger_policy",
]
