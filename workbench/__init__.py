"""Incident Workbench: triage accelerator performance regressions from traces to closure.
Floors, lowest first: accel (numpy only), store, sample, triage, incident, cli, tui; imports point down."""

__version__ = "0.1.0"
