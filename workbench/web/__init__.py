"""The workbench served to a browser (textual-serve with a per-launch token)."""
