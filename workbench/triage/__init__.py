"""Triage: pairing, evidence, localization, judge, incident record, export. Never imports textual."""
