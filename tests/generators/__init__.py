"""Data generators used only by tests and benches (bench/ puts tests/ on sys.path): synthetic
traces and fleets, and the second fault generator (profsim/). The product never imports them."""
