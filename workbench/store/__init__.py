"""Trace store: importers, the Parquet layout, duckdb access. Never imports textual."""
