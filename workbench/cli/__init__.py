"""Command line: thin wrappers over store, triage and incident; each command in its own module.
Imports every floor below it; never the app module (workbench.tui.app): tui/launch.py starts it."""
