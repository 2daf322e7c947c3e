"""The incident record and its work: persistence, lifecycle, owners, workflow, validation and its
judge, the closure summary, its brief and exports. Reads triage results; triage never imports it."""
