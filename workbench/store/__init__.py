"""The trace store proper: layout, object storage, schema, integrity, atomic commit and queries, with
importers/, columns/, attribution/ and fleet/ beneath. Imports accel only; never triage or above."""
