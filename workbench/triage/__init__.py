"""Triage of one pair: pairing, tail-first evidence, lanes and the localization glue over accel,
fleet tails, the verdict text. Imports accel and the store; never incident, cli or tui."""
