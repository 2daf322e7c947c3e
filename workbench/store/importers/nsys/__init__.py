"""The Nsight Systems SQLite export (and its Parquet directory, recognised to say what to export).
Imports the store, columns/ and the importer seam; never another importer."""
