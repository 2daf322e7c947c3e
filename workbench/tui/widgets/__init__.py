"""Widgets the screens share (tables, timeline, plots, path input, incident header and changes).
Imports textual and the layers below the tui; never a screen."""
