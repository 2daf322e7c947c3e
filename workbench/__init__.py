"""Incident Workbench: triage accelerator performance regressions from traces to closure."""

__version__ = "0.1.0"
