"""Command line: thin wrappers over store / triage; each command lives in its own module."""
